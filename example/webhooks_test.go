package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// stripeEvent returns a Stripe-style event body.
func stripeEvent(id, kind string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":"pi_1","amount":2000}}}`, id, kind)
}

// deliver posts an event to baseURL's /webhooks as a provider does: no
// credentials, no Idempotency-Key; sign, if set, adds its headers.
func deliver(t testing.TB, client *http.Client, baseURL, body string, sign func(*http.Request, []byte)) answer {
	t.Helper()
	a, err := tryDeliver(client, baseURL, body, sign)
	require.NoError(t, err)
	return a
}

// tryDeliver is deliver for a goroutine other than the test's.
func tryDeliver(client *http.Client, baseURL, body string, sign func(*http.Request, []byte)) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, baseURL+"/webhooks", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if sign != nil {
		sign(req, []byte(body))
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// listEvents returns GET /webhooks of baseURL, sent without credentials.
func listEvents(t testing.TB, baseURL string) []eventCount {
	t.Helper()
	return getList[eventCount](t, http.DefaultClient, baseURL+"/webhooks", "")
}

// TestWebhookRedelivered: an event is processed once, its redelivery gets
// the same 200 replayed, without credentials or an Idempotency-Key.
func TestWebhookRedelivered(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	require.Equal(t, []eventCount{}, listEvents(t, ta.url))
	first := deliver(t, http.DefaultClient, ta.url, stripeEvent("evt_1", "payment_intent.succeeded"), nil)
	require.Equal(t, http.StatusOK, first.status, first.body)
	assert.JSONEq(t, `{"id":"evt_1","type":"payment_intent.succeeded","status":"processed","times_processed":1}`, first.body)
	again := deliver(t, http.DefaultClient, ta.url, stripeEvent("evt_1", "payment_intent.succeeded"), nil)
	assert.Equal(t, first.body, again.body)
	assert.Equal(t, http.StatusOK, again.status)
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	deliver(t, http.DefaultClient, ta.url, stripeEvent("evt_0", "charge.refunded"), nil)
	assert.Equal(t, []eventCount{{ID: "evt_0", Count: 1}, {ID: "evt_1", Count: 1}}, listEvents(t, ta.url))
}

// TestWebhookRefused: what a delivery the example cannot process gets.
func TestWebhookRefused(t *testing.T) {
	for _, tc := range []struct {
		name, first, body string
		status            int
		problem           string
	}{
		{"the same id with another body", stripeEvent("evt_1", "a"), stripeEvent("evt_1", "b"),
			http.StatusUnprocessableEntity, idempotency.ProblemKeyReused},
		{"no id", "", `{"type":"a"}`, http.StatusBadRequest, idempotency.ProblemKeyMissing},
		{"an id that is not a key", "", `{"id":{"v":1},"type":"a"}`, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"not JSON", "", `id=evt_1`, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"no type", "", `{"id":"evt_2"}`, http.StatusBadRequest, problemInvalidEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := newTestAPI(t, &memoryLedger{})
			want := []eventCount{}
			if tc.first != "" {
				require.Equal(t, http.StatusOK, deliver(t, http.DefaultClient, ta.url, tc.first, nil).status)
				want = []eventCount{{ID: "evt_1", Count: 1}}
			}
			got := deliver(t, http.DefaultClient, ta.url, tc.body, nil)
			assert.Equal(t, tc.status, got.status, got.body)
			assert.Contains(t, got.body, `"type":"`+tc.problem+`"`)
			assert.Equal(t, want, listEvents(t, ta.url), "nothing more was processed")
		})
	}
}
