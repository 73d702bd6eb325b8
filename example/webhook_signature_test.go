package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testWebhookSecret = "whsec_test"

// stripeSignature returns the v1 signature of body at unix time stamp
// under secret.
func stripeSignature(secret string, stamp int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.", stamp)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// signedAt returns a signer that adds Stripe-Signature at time at under
// secret, as Stripe does.
func signedAt(secret string, at time.Time) func(*http.Request, []byte) {
	return func(r *http.Request, body []byte) {
		r.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s", at.Unix(), stripeSignature(secret, at.Unix(), body)))
	}
}

func TestCheckSignature(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(stripeEvent("evt_1", "invoice.paid"))
	good := stripeSignature(testWebhookSecret, now.Unix(), body)
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	for _, tc := range []struct {
		name, header string
		valid        bool
	}{
		{"valid", fmt.Sprintf("t=%d,v1=%s", now.Unix(), good), true},
		{"valid with spaces and a v0", fmt.Sprintf("t=%d, v0=abcd, v1=%s", now.Unix(), good), true},
		{"one of several v1, as during a secret's rotation", fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), strings.Repeat("0", 64), good), true},
		{"four minutes old", fmt.Sprintf("t=%d,v1=%s", at(-4*time.Minute), stripeSignature(testWebhookSecret, at(-4*time.Minute), body)), true},
		{"six minutes old", fmt.Sprintf("t=%d,v1=%s", at(-6*time.Minute), stripeSignature(testWebhookSecret, at(-6*time.Minute), body)), false},
		{"six minutes ahead", fmt.Sprintf("t=%d,v1=%s", at(6*time.Minute), stripeSignature(testWebhookSecret, at(6*time.Minute), body)), false},
		{"another secret", fmt.Sprintf("t=%d,v1=%s", now.Unix(), stripeSignature("whsec_other", now.Unix(), body)), false},
		{"another body", fmt.Sprintf("t=%d,v1=%s", now.Unix(), stripeSignature(testWebhookSecret, now.Unix(), []byte("{}"))), false},
		{"another timestamp", fmt.Sprintf("t=%d,v1=%s", at(time.Second), good), false},
		{"only v0", fmt.Sprintf("t=%d,v0=%s", now.Unix(), good), false},
		{"no timestamp", "v1=" + good, false},
		{"timestamp not a number", "t=now,v1=" + good, false},
		{"v1 not hex", fmt.Sprintf("t=%d,v1=%s", now.Unix(), strings.Repeat("z", 64)), false},
		{"v1 cut short", fmt.Sprintf("t=%d,v1=%s", now.Unix(), good[:62]), false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason := checkSignature(tc.header, body, []byte(testWebhookSecret), now)
			assert.Equal(t, tc.valid, reason == "", reason)
		})
	}
}

// TestWebhookSignatureBeforeMiddleware: with a secret, an event whose
// signature does not verify gets 400 and never reaches the idempotency
// middleware: it claims no key, so the genuine event under its id, with
// another body, is processed rather than refused as a reused key.
func TestWebhookSignatureBeforeMiddleware(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	a := &api{ledger: &memoryLedger{}, log: logger, webhookSecret: []byte(testWebhookSecret)}
	srv := httptest.NewServer(a.routes(newMiddleware(nil, time.Minute, logger), newWebhookMiddleware(nil, time.Minute, logger)))
	t.Cleanup(srv.Close)
	forged := stripeEvent("evt_1", "payout.paid")
	for name, sign := range map[string]func(*http.Request, []byte){
		"unsigned":    nil,
		"another key": signedAt("whsec_guess", time.Now()),
		"too old":     signedAt(testWebhookSecret, time.Now().Add(-time.Hour)),
	} {
		got := deliver(t, http.DefaultClient, srv.URL, forged, sign)
		assert.Equal(t, http.StatusBadRequest, got.status, name)
		assert.Contains(t, got.body, problemBadSignature, name)
	}
	genuine := deliver(t, http.DefaultClient, srv.URL, stripeEvent("evt_1", "invoice.paid"), signedAt(testWebhookSecret, time.Now()))
	require.Equal(t, http.StatusOK, genuine.status, genuine.body)
	assert.Empty(t, genuine.header.Get("Idempotent-Replayed"))
	assert.Equal(t, []eventCount{{ID: "evt_1", Count: 1}}, listEvents(t, srv.URL))
}
