package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestDefaultRouteKeepsVirtualHostsApart: one middleware in front of a
// ServeMux that serves POST /payments for two hosts; the same key and body
// sent to each, through a real server, runs each host's handler once, and a
// retry to either host replays that host's own response.
func TestDefaultRouteKeepsVirtualHostsApart(t *testing.T) {
	var runs [2]atomic.Int64
	mux := http.NewServeMux()
	for i, host := range []string{"a.example", "b.example"} {
		mux.HandleFunc("POST "+host+"/payments", func(w http.ResponseWriter, r *http.Request) {
			runs[i].Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, host+" payment")
		})
	}
	srv := httptest.NewServer(idempotency.New()(mux))
	defer srv.Close()
	send := func(host string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":5}`))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Idempotency-Key", "k")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		return resp
	}
	for _, host := range []string{"a.example", "b.example", "a.example", "b.example"} {
		resp := send(host)
		require.Equal(t, http.StatusCreated, resp.StatusCode, host)
		require.Equal(t, host+" payment", readAll(t, resp))
	}
	require.EqualValues(t, 1, runs[0].Load(), "a.example ran once")
	require.EqualValues(t, 1, runs[1].Load(), "b.example ran once, not answered with a.example's response")
}

// TestDefaultRouteHost: the spellings of one host (case, a default port, a
// trailing dot) share a record, so a retry finds it; another host or
// another port does not.
func TestDefaultRouteHost(t *testing.T) {
	cases := []struct {
		first, retry string
		same         bool
	}{
		{"a.example", "A.Example", true},
		{"a.example", "a.example:80", true},
		{"a.example", "a.example:443", true},
		{"a.example", "a.example:", true},
		{"a.example", "a.example.", true},
		{"[::1]", "[::1]:80", true},
		{"a.example", "b.example", false},
		{"a.example", "a.example:8080", false},
		{"[::1]", "[::1]:8080", false},
		{"a.example", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.first+" then "+tc.retry, func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New()(h)
			at := func(host string) func(*http.Request) {
				return func(r *http.Request) { r.Host = host }
			}
			post(mw, "k", "{}", at(tc.first))
			replayed := post(mw, "k", "{}", at(tc.retry)).Header.Get("Idempotent-Replayed") == "true"
			require.Equal(t, tc.same, replayed)
			require.EqualValues(t, map[bool]int64{true: 1, false: 2}[tc.same], h.runs.Load())
		})
	}
}
