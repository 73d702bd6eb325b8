package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

func TestPaymentReplayed(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	first := ta.post(t, "/payments", "pay-1", `{"amount": 1250, "currency": "eur"}`)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	var p payment
	require.NoError(t, json.Unmarshal([]byte(first.body), &p))
	assert.Regexp(t, `^pay_[0-9a-f]{16}$`, p.ID)
	assert.Equal(t, payment{ID: p.ID, Amount: 1250, Currency: "EUR"}, p)
	assert.Equal(t, "/payments/"+p.ID, first.header.Get("Location"))
	assert.Equal(t, "application/json", first.header.Get("Content-Type"))
	assert.Empty(t, first.header.Get("Idempotent-Replayed"))

	again := ta.post(t, "/payments", "pay-1", `{"amount": 1250, "currency": "eur"}`)
	assert.Equal(t, first.status, again.status)
	assert.Equal(t, first.body, again.body)
	assert.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
	assert.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	assert.Equal(t, strconv.Itoa(os.Getpid()), again.header.Get("X-Worker-Pid"))
	assert.Equal(t, 1, ta.ledgerLen(t))

	list := ta.get(t, "/payments")
	assert.Equal(t, http.StatusOK, list.status)
	assert.JSONEq(t, "["+first.body+"]", list.body)
	one := ta.get(t, first.header.Get("Location"))
	assert.Equal(t, http.StatusOK, one.status)
	assert.JSONEq(t, first.body, one.body)
}

// gatedLedger holds every Create, after the payment is recorded, until
// release is closed; created gets one value per recorded payment.
type gatedLedger struct {
	ledger
	created chan struct{}
	release chan struct{}
}

func (g *gatedLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	p, err := g.ledger.Create(ctx, ref, account, amount, currency)
	g.created <- struct{}{}
	<-g.release
	return p, err
}

// TestPaymentIsIdempotent: the service's router, as serve builds it,
// passes idempotencytest.RequireIdempotent: twenty concurrent duplicates
// of a payment make one payment and get one answer, and the key with
// another amount gets 422.
func TestPaymentIsIdempotent(t *testing.T) {
	led := &memoryLedger{}
	a := withProvider(t, &api{ledger: led, log: slog.New(slog.DiscardHandler), jobs: store.NewMemory()})
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount": 500, "currency": "EUR"}`))
	req.Header.Set("Idempotency-Key", "order-1")
	asCaller(req, testAccount)
	idempotencytest.RequireIdempotent(t, a.routes(newMiddleware(nil, 30*time.Second, a.log), newWebhookMiddleware(nil, 30*time.Second, a.log)), req, 20, `{"amount": 501, "currency": "EUR"}`)
	payments, err := led.List(t.Context(), testAccount)
	require.NoError(t, err)
	require.Len(t, payments, 1)
}

func TestPaymentConflictWhileRunning(t *testing.T) {
	g := &gatedLedger{ledger: &memoryLedger{}, created: make(chan struct{}, 1), release: make(chan struct{})}
	ta := newTestAPI(t, g)
	body := `{"amount": 500, "currency": "USD"}`
	firstc := make(chan answer, 1)
	go func() { firstc <- ta.post(t, "/payments", "pay-2", body) }()
	<-g.created

	dup := ta.post(t, "/payments", "pay-2", body)
	assert.Equal(t, http.StatusConflict, dup.status)
	assert.NotEmpty(t, dup.header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", dup.header.Get("Content-Type"))

	close(g.release)
	first := <-firstc
	require.Equal(t, http.StatusCreated, first.status, first.body)
	replay := ta.post(t, "/payments", "pay-2", body)
	assert.Equal(t, first.body, replay.body)
	assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	assert.Equal(t, 1, ta.ledgerLen(t))
}

// TestPaymentRefused: a payment the middleware refuses, sent without a key
// or under a key already used for another body, gets a problem and charges
// nothing.
func TestPaymentRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    string // posted under key before body, and created
		key      string
		body     string
		status   int
		payments int // in the ledger at the end
	}{
		{name: "NeedsKey", key: "", body: `{"amount": 500, "currency": "USD"}`,
			status: http.StatusBadRequest, payments: 0},
		{name: "KeyReusedForAnotherBody", first: `{"amount": 500, "currency": "USD"}`, key: "pay-3", body: `{"amount": 900, "currency": "USD"}`,
			status: http.StatusUnprocessableEntity, payments: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := newTestAPI(t, &memoryLedger{})
			if tc.first != "" {
				first := ta.post(t, "/payments", tc.key, tc.first)
				require.Equal(t, http.StatusCreated, first.status, first.body)
			}
			got := ta.post(t, "/payments", tc.key, tc.body)
			assert.Equal(t, tc.status, got.status)
			assert.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
			assert.Equal(t, tc.payments, ta.ledgerLen(t))
		})
	}
}

func TestPaymentBadInput(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	for name, body := range map[string]string{
		"not JSON":                 `{"amount": 5`,
		"not an object":            `[1, 2]`,
		"amount zero":              `{"amount": 0, "currency": "EUR"}`,
		"amount negative":          `{"amount": -5, "currency": "EUR"}`,
		"amount fraction":          `{"amount": 1.5, "currency": "EUR"}`,
		"amount too large":         `{"amount": 1000000001, "currency": "EUR"}`,
		"amount over int":          `{"amount": 9223372036854775808, "currency": "EUR"}`,
		"no currency":              `{"amount": 5}`,
		"currency long":            `{"amount": 5, "currency": "EURO"}`,
		"currency digit":           `{"amount": 5, "currency": "E1R"}`,
		"unknown field":            `{"amount": 5, "currency": "EUR", "to": "x"}`,
		"amount twice":             `{"amount": 5, "amount": 7000, "currency": "EUR"}`,
		"amount twice, other case": `{"amount": 5, "AMOUNT": 7000, "currency": "EUR"}`,
		"trailing data":            `{"amount": 5, "currency": "EUR"} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			// A key of its own, valid whatever the case's name, so that the
			// 400 is the handler's and not the middleware's for a bad key.
			key := "bad-" + strings.Map(func(r rune) rune {
				if r == ' ' || r == ',' {
					return '-'
				}
				return r
			}, name)
			got := ta.post(t, "/payments", key, body)
			assert.Equal(t, http.StatusBadRequest, got.status)
			assert.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
			assert.Contains(t, got.body, `"status":400`)
			assert.Contains(t, got.body, problemInvalidPayment)
			assert.NotContains(t, got.body, idempotency.ProblemKeyInvalid, "the key was refused, not the body")
		})
	}
	assert.Equal(t, 0, ta.ledgerLen(t))
}

func TestPaymentsListAndGet(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	empty := ta.get(t, "/payments")
	assert.Equal(t, http.StatusOK, empty.status)
	assert.JSONEq(t, `[]`, empty.body)
	missing := ta.get(t, "/payments/pay_0000000000000000")
	assert.Equal(t, http.StatusNotFound, missing.status)
	assert.Equal(t, "application/problem+json", missing.header.Get("Content-Type"))
}

// TestPaymentNeedsAnAccount: a request without an API key gets 401 asking
// for Basic credentials, reads included, and pays nothing.
func TestPaymentNeedsAnAccount(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	for name, got := range map[string]answer{
		"POST /payments":     ta.postAs(t, "", "/payments", "pay-1", `{"amount": 500, "currency": "USD"}`),
		"GET /payments":      ta.getAs(t, "", "/payments"),
		"GET /payments/{id}": ta.getAs(t, "", "/payments/pay_0000000000000000"),
		"POST /emails":       ta.postAs(t, "", "/emails", "mail-1", `{"to": "ada@example.com", "subject": "Hi"}`),
	} {
		assert.Equal(t, http.StatusUnauthorized, got.status, name)
		assert.Equal(t, `Basic realm="payments"`, got.header.Get("WWW-Authenticate"), name)
		assert.Equal(t, "application/problem+json", got.header.Get("Content-Type"), name)
	}
	assert.Equal(t, 0, ta.ledgerLen(t))
	assert.NotContains(t, ta.logs.String(), "email sent")
}

// TestPaymentsOfTwoAccounts: the same Idempotency-Key from two accounts
// makes two payments, and each account sees its own only.
func TestPaymentsOfTwoAccounts(t *testing.T) {
	led := &memoryLedger{}
	ta := newTestAPI(t, led)
	body := `{"amount": 500, "currency": "USD"}`
	alice := ta.postAs(t, "sk_test_alice", "/payments", "order-1", body)
	bob := ta.postAs(t, "sk_test_bob", "/payments", "order-1", body)
	for name, got := range map[string]answer{"alice": alice, "bob": bob} {
		require.Equal(t, http.StatusCreated, got.status, "%s: %s", name, got.body)
		assert.Empty(t, got.header.Get("Idempotent-Replayed"), "%s ran, not replayed", name)
	}
	assert.NotEqual(t, alice.body, bob.body)

	assert.JSONEq(t, "["+alice.body+"]", ta.getAs(t, "sk_test_alice", "/payments").body)
	assert.JSONEq(t, "["+bob.body+"]", ta.getAs(t, "sk_test_bob", "/payments").body)
	assert.Equal(t, http.StatusNotFound, ta.getAs(t, "sk_test_bob", alice.header.Get("Location")).status,
		"bob cannot see alice's payment")
	assert.Equal(t, http.StatusOK, ta.getAs(t, "sk_test_alice", alice.header.Get("Location")).status)
	assert.Equal(t, 2, strings.Count(ta.logs.String(), `msg="payment made"`))
}

// TestInvalidPaymentIsNotRecorded: a body that fails validation gets 400
// invalid-payment and its key is released, so the corrected body under the
// same key makes the payment (201), and is then replayed.
func TestInvalidPaymentIsNotRecorded(t *testing.T) {
	for name, invalid := range map[string]string{
		"missing currency":    `{"amount": 500}`,
		"amount not positive": `{"amount": -5, "currency": "EUR"}`,
		"amount fraction":     `{"amount": 2.5, "currency": "EUR"}`,
	} {
		t.Run(name, func(t *testing.T) {
			ta := newTestAPI(t, &memoryLedger{})
			refused := ta.post(t, "/payments", "order-7", invalid)
			require.Equal(t, http.StatusBadRequest, refused.status)
			assert.Contains(t, refused.body, problemInvalidPayment)

			corrected := ta.post(t, "/payments", "order-7", `{"amount": 500, "currency": "EUR"}`)
			require.Equal(t, http.StatusCreated, corrected.status, corrected.body)
			assert.Empty(t, corrected.header.Get("Idempotent-Replayed"))
			again := ta.post(t, "/payments", "order-7", `{"amount": 500, "currency": "EUR"}`)
			assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
			assert.Equal(t, corrected.body, again.body)
			assert.Equal(t, 1, ta.ledgerLen(t))
		})
	}
}

// TestPaymentLogsItsProviderKey: the handler logs the key its charge sends
// the payment provider, derived from the request's idempotency key: 43
// URL-safe characters, another for the same key from another account; a
// replay charges nothing and logs nothing.
func TestPaymentLogsItsProviderKey(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	body := `{"amount": 500, "currency": "USD"}`
	ta.postAs(t, "sk_test_alice", "/payments", "order-1", body)
	ta.postAs(t, "sk_test_alice", "/payments", "order-1", body)
	ta.postAs(t, "sk_test_bob", "/payments", "order-1", body)
	keys := providerKeys(ta.logs.String())
	require.Len(t, keys, 2, ta.logs.String())
	for _, k := range keys {
		assert.Regexp(t, `^[A-Za-z0-9_-]{43}$`, k)
	}
	assert.NotEqual(t, keys[0], keys[1])
}

// failingLedger fails the first fails of its Creates, recording nothing.
type failingLedger struct {
	ledger
	fails atomic.Int32
}

func (f *failingLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	if f.fails.Add(-1) >= 0 {
		return payment{}, errors.New("the ledger is down")
	}
	return f.ledger.Create(ctx, ref, account, amount, currency)
}

// TestPaymentResumesAfterItsCharge: a payment whose ledger step failed
// after its charge is retried with the same key and finishes without
// asking the provider to charge it again: the charge step's result was
// stored, and the retry gets it back. On a store that keeps no steps the
// charge runs on every run, always under the key its step would send, so
// the provider charges once.
func TestPaymentResumesAfterItsCharge(t *testing.T) {
	for _, c := range []struct {
		name    string
		records store.Store
		calls   string
	}{
		{"steps kept", nil, `{"calls": 1, "keys": 1}`},
		{"no steps", storeWithoutSteps{store.NewMemory()}, `{"calls": 3, "keys": 1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			led := &failingLedger{ledger: &memoryLedger{}}
			led.fails.Store(2)
			ta := newTestAPIOn(t, led, c.records)
			body := `{"amount": 900, "currency": "EUR"}`
			for range 2 {
				failed := ta.post(t, "/payments", "order-9", body)
				require.Equal(t, http.StatusInternalServerError, failed.status, failed.body)
			}
			done := ta.post(t, "/payments", "order-9", body)
			require.Equal(t, http.StatusCreated, done.status, done.body)
			assert.JSONEq(t, c.calls, ta.get(t, "/provider/charges").body)
			assert.Equal(t, 1, ta.ledgerLen(t))
		})
	}
}

// storeWithoutSteps is a store that keeps no steps (not a store.StepStore).
type storeWithoutSteps struct {
	store.Store
}
