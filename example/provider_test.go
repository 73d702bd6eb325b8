package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProviderCharges: the fake provider counts every call by its key,
// answers the same charge for the same key, and refuses a call without a
// key or a valid payment.
func TestProviderCharges(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	charge := func(key, body string) answer {
		req, err := http.NewRequest(http.MethodPost, ta.url+"/provider/charges", strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		return do(t, req)
	}
	first := charge("k1", `{"amount": 500, "currency": "EUR"}`)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	assert.Regexp(t, `^\{"id":"ch_[0-9a-f]{16}","amount":500,"currency":"EUR"\}`, first.body)
	again := charge("k1", `{"amount": 500, "currency": "EUR"}`)
	assert.Equal(t, first.body, again.body, "the same key, the same charge")
	other := charge("k2", `{"amount": 500, "currency": "EUR"}`)
	assert.NotEqual(t, first.body, other.body)
	for name, c := range map[string]answer{
		"no key":     charge("", `{"amount": 500, "currency": "EUR"}`),
		"no payment": charge("k3", `{"amount": 0}`),
		"not JSON":   charge("k3", `charge me`),
	} {
		assert.Equal(t, http.StatusBadRequest, c.status, name)
	}
	calls := ta.get(t, "/provider/charges")
	require.Equal(t, http.StatusOK, calls.status)
	assert.JSONEq(t, `{"calls": 3, "keys": 2}`, calls.body, "refused calls are not counted")
}
