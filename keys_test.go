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

func TestBodyReachesHandlerIntact(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	body := strings.Repeat(`{"k":"v"}`, 1000)
	require.Equal(t, body, readAll(t, post(mw, "k", body)))
}

func TestOversizedBodyGets413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithMaxBodyBytes(10))(h)
	require.Equal(t, http.StatusCreated, post(mw, "at-limit", "0123456789").StatusCode)
	requireProblem(t, post(mw, "k", "0123456789x"), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	unknownLength := func(r *http.Request) { r.ContentLength = -1 }
	requireProblem(t, post(mw, "k2", "0123456789x", unknownLength), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.EqualValues(t, 1, h.runs.Load())
	require.Equal(t, http.StatusCreated, post(mw, "k", "small").StatusCode, "a 413 leaves the key unused")
}
