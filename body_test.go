package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

// TestBodyReadAfterTheRequestIsEmpty: the buffered body's memory is reused
// by later requests once its own is done, so a read of the body after the
// middleware returned (by a middleware outside, which shares the request)
// finds nothing, never a later request's bytes. Bodies of different sizes
// each reach their handler whole, through the reused buffers.
func TestBodyReadAfterTheRequestIsEmpty(t *testing.T) {
	var got []string
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Read") != "" {
			b, _ := io.ReadAll(r.Body)
			got = append(got, string(b))
		}
	}))
	send := func(key, body string, read bool) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		if read {
			r.Header.Set("X-Read", "1")
		}
		mw.ServeHTTP(httptest.NewRecorder(), r)
		return r
	}
	unread := send("a", "the first request's body", false)
	want := []string{strings.Repeat("b", 5000), "c", strings.Repeat("d", 100)}
	for i, body := range want {
		send(string(rune('b'+i)), body, true)
	}
	require.Equal(t, want, got)
	after, err := io.ReadAll(unread.Body)
	require.NoError(t, err)
	require.Empty(t, string(after), "a read after the request was done")
}
