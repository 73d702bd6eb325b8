package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestDefaultRouteIgnoresTheHost: one account sends one payment, key and
// body, through a real server, under three names of the service (a DNS
// name, its IPv4 and its IPv6 address): the handler runs once, and the
// other two are replays of its response.
func TestDefaultRouteIgnoresTheHost(t *testing.T) {
	h := &paymentHandler{}
	account := func(r *http.Request) string { return r.Header.Get("X-Account") }
	srv := httptest.NewServer(idempotency.New(idempotency.WithScope(account))(h))
	defer srv.Close()
	replays := 0
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":500}`))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("X-Account", "alice")
		req.Header.Set("Idempotency-Key", "order-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, host)
		require.Equal(t, `{"amount":500}`, readAll(t, resp), host)
		if idempotency.Replayed(resp) {
			replays++
		}
	}
	require.EqualValues(t, 1, h.runs.Load(), "one run under three names")
	require.Equal(t, 2, replays)
}

// TestRouteWithHostKeepsVirtualHostsApart: one middleware, routed by
// RouteWithHost, in front of a ServeMux that serves POST /payments for two
// hosts; the same key and body sent to each, through a real server, runs
// each host's handler once, and a retry to either host replays that host's
// own response.
func TestRouteWithHostKeepsVirtualHostsApart(t *testing.T) {
	var runs [2]atomic.Int64
	mux := http.NewServeMux()
	for i, host := range []string{"a.example", "b.example"} {
		mux.HandleFunc("POST "+host+"/payments", func(w http.ResponseWriter, r *http.Request) {
			runs[i].Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, host+" payment")
		})
	}
	srv := httptest.NewServer(idempotency.New(idempotency.WithRoute(idempotency.RouteWithHost))(mux))
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

// TestRouteWithHost: under RouteWithHost, the spellings of one host (case,
// a default port, a trailing dot) share a record, so a retry finds it;
// another host or another port does not.
func TestRouteWithHost(t *testing.T) {
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
			mw := idempotency.New(idempotency.WithRoute(idempotency.RouteWithHost))(h)
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

func TestSameKeyOnTwoRoutesDoesNotCollide(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	require.Empty(t, serve(mw, http.MethodPost, "/payments", "k", "{}").Header.Get("Idempotent-Replayed"))
	require.Empty(t, serve(mw, http.MethodPost, "/emails", "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, h.runs.Load())
}

// TestSameKeyOnTwoMountsDoesNotCollide: one middleware under two
// http.StripPrefix mounts sees the same r.URL.Path on both; the default
// route is the path the client sent, so the second mount's request runs
// its own handler instead of getting the first's response.
func TestSameKeyOnTwoMountsDoesNotCollide(t *testing.T) {
	mw := idempotency.New()
	mux := http.NewServeMux()
	for _, version := range []string{"v1", "v2"} {
		mux.Handle("/"+version+"/", http.StripPrefix("/"+version, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, version+" payment")
		}))))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	require.Equal(t, "v1 payment", readAll(t, postTo(t, srv.URL+"/v1/payments", "k", "{}")))
	require.Equal(t, "v2 payment", readAll(t, postTo(t, srv.URL+"/v2/payments", "k", "{}")))
}

// TestRouteOfAnAbsoluteFormRequest: a client whose proxy is the server
// itself sends the request line in absolute form (POST http://host/path);
// its route is the same as in origin form, so a retry in either form finds
// the first one's record, and two mounts under http.StripPrefix stay apart.
func TestRouteOfAnAbsoluteFormRequest(t *testing.T) {
	var runs atomic.Int64
	mw := idempotency.New()
	mux := http.NewServeMux()
	for _, version := range []string{"v1", "v2"} {
		mux.Handle("/"+version+"/", http.StripPrefix("/"+version, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			_, _ = io.WriteString(w, version+" payment")
		}))))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	proxy, err := url.Parse(srv.URL)
	require.NoError(t, err)
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	send := func(client *http.Client, path string) string {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k")
		resp, err := client.Do(req)
		require.NoError(t, err)
		return readAll(t, resp)
	}
	require.Equal(t, "v1 payment", send(viaProxy, "/v1/payments"))
	require.Equal(t, "v1 payment", send(http.DefaultClient, "/v1/payments"), "the retry in origin form")
	require.Equal(t, "v2 payment", send(viaProxy, "/v2/payments"))
	require.EqualValues(t, 2, runs.Load(), "once per mount")
}

// TestRouteOfARequestMadeInProcess: a request handed to the middleware
// directly, without a request line (RequestURI), is routed by r.URL.Path;
// one without a body (nil) reaches the handler with an empty one.
func TestRouteOfARequestMadeInProcess(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	for _, path := range []string{"/payments", "/emails"} {
		r, err := http.NewRequest(http.MethodPost, "http://example.com"+path, nil)
		require.NoError(t, err)
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		require.Empty(t, w.Header().Get("Idempotent-Replayed"), path)
	}
	require.EqualValues(t, 2, h.runs.Load())
}

func TestWithRoute(t *testing.T) {
	h := &paymentHandler{}
	everyPath := func(*http.Request) string { return "payments" }
	mw := idempotency.New(idempotency.WithRoute(everyPath), idempotency.WithFingerprint(
		func(r *http.Request, body []byte) string { return string(body) }))(h)
	serve(mw, http.MethodPost, "/payments/a", "k", "{}")
	resp := serve(mw, http.MethodPost, "/payments/b", "k", "{}")
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "one route name for both paths")
	require.EqualValues(t, 1, h.runs.Load())
}
