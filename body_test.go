package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestBodyReadByAScopeReachesTheHandlerWhole: a scope function that reads
// the body (here ParseForm, for a tenant sent as a form field) does not
// consume it: the handler still gets every byte.
func TestBodyReadByAScopeReachesTheHandlerWhole(t *testing.T) {
	var got string
	scope := idempotency.WithScope(func(r *http.Request) string {
		_ = r.ParseForm()
		return r.PostForm.Get("tenant")
	})
	srv := httptest.NewServer(idempotency.New(scope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	})))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader("tenant=t1&amount=5"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "k")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "tenant=t1&amount=5", got)
}

// TestRequestWithoutABodyKeepsNoBody: a protected request that has no
// body reaches the handler with http.NoBody, as it does without a key.
func TestRequestWithoutABodyKeepsNoBody(t *testing.T) {
	var noBody []bool
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noBody = append(noBody, r.Body == http.NoBody)
	})))
	defer srv.Close()
	for _, key := range []string{"", "k"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	require.Equal(t, []bool{true, true}, noBody, "without a key, then with one")
}

// gatedWriter passes on what it is given only once its gate opens, as a
// slow client connection does.
type gatedWriter struct {
	gate chan struct{}
	got  chan string
}

func (g gatedWriter) Write(p []byte) (int, error) {
	<-g.gate
	g.got <- string(p)
	return len(p), nil
}

// TestBodyReadAfterTheMiddlewareReturned: a handler may go on reading its
// body after the middleware has returned (under http.TimeoutHandler, which
// answers 503 and leaves the handler running), and reads its own bytes even
// once later requests have come and gone, never theirs. The middleware
// therefore gives every body its own buffer.
func TestBodyReadAfterTheMiddlewareReturned(t *testing.T) {
	g := gatedWriter{gate: make(chan struct{}), got: make(chan string, 1)}
	slow := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(g, r.Body) })
	timedOut := idempotency.New()(http.TimeoutHandler(slow, 20*time.Millisecond, "timeout"))
	require.Equal(t, http.StatusServiceUnavailable, post(timedOut, "a", strings.Repeat("A", 1000)).StatusCode)

	later := idempotency.New()(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }))
	for i := range 20 {
		post(later, fmt.Sprint("b", i), strings.Repeat("B", 1000))
	}
	close(g.gate)
	require.Equal(t, strings.Repeat("A", 1000), <-g.got, "the first handler read another request's body")
}
