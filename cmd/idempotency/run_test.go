package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// pay sends a payment through the middleware on s, scoped by the X-Account
// header, with opts, and returns the body the client got.
func pay(t *testing.T, s store.Store, account, key string, opts ...idempotency.Option) string {
	t.Helper()
	mw := idempotency.New(append([]idempotency.Option{idempotency.WithStore(s),
		idempotency.WithScope(func(r *http.Request) string { return r.Header.Get("X-Account") }),
	}, opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1","amount":500}`))
	}))
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":500}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", account)
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code)
	return rec.Body.String()
}

// TestInspectAndDeleteARequest: a completed request's record is found by
// its scope, method, route and key, or by its key_hash, shown as the
// client got it, and deleted; then it is absent.
func TestInspectAndDeleteARequest(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		body := pay(t, tg.store, "acct_1", "k-1")
		hash := store.HashKey(idempotency.StorageKey("acct_1", "POST", "/payments", "k-1"))
		byRequest := []string{"-scope", "acct_1", "-method", "POST", "-route", "/payments", "-key", "k-1"}

		for _, naming := range [][]string{byRequest, {"-hash", hash[:idempotency.KeyHashLen]}} {
			r := runCmd(tg, append([]string{"inspect"}, naming...)...)
			require.Equal(t, exitFound, r.code, r.stderr)
			out := r.json(t)
			require.Equal(t, hash, out["hash"])
			require.Equal(t, "completed", out["state"])
			require.EqualValues(t, 201, out["status"])
			require.Equal(t, body, out["body"])
			require.Equal(t, map[string]any{"Content-Type": []any{"application/json"}}, out["header"])
			require.Positive(t, out["fence"])
			require.InDelta(t, (24 * time.Hour).Milliseconds(), out["ttl_ms"], float64(time.Minute.Milliseconds()))
		}
		r := runCmd(tg, append([]string{"inspect", "-scope", "acct_2"}, byRequest[2:]...)...)
		require.Equal(t, exitAbsent, r.code, "another scope's key: %s", r.stderr)
		require.Equal(t, map[string]any{"hash": store.HashKey(idempotency.StorageKey("acct_2", "POST", "/payments", "k-1")),
			"state": "absent"}, r.json(t))

		r = runCmd(tg, append([]string{"delete"}, byRequest...)...)
		require.Equal(t, exitFound, r.code, r.stderr)
		require.Equal(t, map[string]any{"hash": hash, "deleted": true}, r.json(t))
		r = runCmd(tg, append([]string{"inspect"}, byRequest...)...)
		require.Equal(t, exitAbsent, r.code, r.stderr)
		r = runCmd(tg, append([]string{"delete"}, byRequest...)...)
		require.Equal(t, exitAbsent, r.code, r.stderr)
		require.Equal(t, false, r.json(t)["deleted"])
	})
}

// TestDeleteInFlight: a record in flight is shown with its fence and lease
// left; deleting it without -force fails and changes nothing, with -force
// it is gone.
func TestDeleteInFlight(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		rec, claimed, err := tg.store.Claim(t.Context(), idempotency.DoStorageKey("", "job-1"), "fp", "token", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)

		r := runCmd(tg, "inspect", "-job", "job-1")
		require.Equal(t, exitFound, r.code, r.stderr)
		out := r.json(t)
		require.Equal(t, "in-flight", out["state"])
		require.EqualValues(t, rec.Owner.Fence, out["fence"])
		require.InDelta(t, time.Minute.Milliseconds(), out["ttl_ms"], float64(10*time.Second.Milliseconds()))
		require.NotContains(t, out, "status")

		r = runCmd(tg, "delete", "-job", "job-1")
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "-force")
		require.Empty(t, r.stdout)
		require.Equal(t, "in-flight", runCmd(tg, "inspect", "-job", "job-1").json(t)["state"], "a refused delete changes nothing")

		r = runCmd(tg, "delete", "-force", "-job", "job-1")
		require.Equal(t, exitFound, r.code, r.stderr)
		require.Equal(t, exitAbsent, runCmd(tg, "inspect", "-job", "job-1").code)
	})
}

// TestHashPrefixNamingTwoRecords: a -hash prefix that begins the hashes of
// two live records is an error listing them.
func TestHashPrefixNamingTwoRecords(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		byDigit := map[byte]string{}
		var prefix string
		for i := 0; prefix == ""; i++ { // 17 hashes share a first digit
			job := "job-" + string(rune('a'+i))
			_, err := idempotency.Do(t.Context(), tg.store, job, func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
			hash := store.HashKey(idempotency.DoStorageKey("", job))
			if _, seen := byDigit[hash[0]]; seen {
				prefix = hash[:1]
			}
			byDigit[hash[0]] = hash
		}
		r := runCmd(tg, "inspect", "-hash", prefix)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "more than one record")
		require.Contains(t, r.stderr, byDigit[prefix[0]][:16])
	})
}

// TestStoreUnreachable: a store that does not answer is an error, within
// -timeout.
func TestStoreUnreachable(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run([]string{"inspect", "-store", "redis", "-url", "redis://127.0.0.1:1/0", "-timeout", "2s", "-job", "j"}, &stdout, &stderr)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr.String(), "idempotency inspect:")
	require.Empty(t, stdout.String())
}
