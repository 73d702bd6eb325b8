package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestReplayedHeaders(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range []string{"Location", "Content-Type", "ETag", "Last-Modified", "Link",
			"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate", "Connection",
			"Keep-Alive", "Upgrade", "X-Request-Id", "X-Trace"} {
			w.Header().Add(name, "v-"+name)
		}
		w.Header().Add("Link", "second-link")
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New(idempotency.WithReplayHeaders("x-request-id"))(h)
	post(mw, "k", "{}")
	got := post(mw, "k", "{}").Header
	for _, name := range []string{"Location", "Content-Type", "ETag", "Last-Modified", "X-Request-Id"} {
		require.Equal(t, []string{"v-" + name}, got.Values(name), name)
	}
	require.Equal(t, []string{"v-Link", "second-link"}, got.Values("Link"))
	for _, name := range []string{"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate",
		"Connection", "Keep-Alive", "Upgrade", "X-Trace"} {
		require.Empty(t, got.Values(name), name)
	}
}

func TestServeContentIsReplayed(t *testing.T) {
	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "receipt.txt", modified, strings.NewReader("receipt body"))
	})))
	defer srv.Close()
	first := postTo(t, srv.URL, "k", "{}")
	dup := postTo(t, srv.URL, "k", "{}")
	for _, resp := range []*http.Response{first, dup} {
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
		require.Equal(t, modified.Format(http.TimeFormat), resp.Header.Get("Last-Modified"))
		require.Equal(t, "receipt body", readAll(t, resp))
	}
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
}
