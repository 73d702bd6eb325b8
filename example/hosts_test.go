package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamplePaymentUnderThreeHostNames: one account sends one payment,
// key and body, to the running service under three names of it (localhost,
// its IPv4 and its IPv6 address): one payment is made, and the other two
// requests get it replayed.
func TestExamplePaymentUnderThreeHostNames(t *testing.T) {
	p := startExample(t, "-store", "memory")
	service, err := url.Parse(p.URL)
	require.NoError(t, err)
	client := &http.Client{Timeout: time.Minute}
	var bodies []string
	replays := 0
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]"} {
		req, err := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(paymentBody))
		require.NoError(t, err)
		req.Host = host + ":" + service.Port()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-1")
		asCaller(req, testAccount)
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", req.Host, body)
		bodies = append(bodies, string(body))
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	assert.Equal(t, 2, replays)
	assert.Equal(t, []string{bodies[0], bodies[0], bodies[0]}, bodies, "one payment, replayed")
	assert.Len(t, listPayments(t, client, p.URL), 1)
	assert.Len(t, providerKeys(p.Log()), 1, "one call to the payment provider")
}
