package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// neverStoredHeaders are the headers SPEC §4 says are never stored or
// replayed: credentials, cookies and the hop-by-hop headers, spelled as
// they are usually written.
var neverStoredHeaders = []string{
	"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate",
	"Proxy-Authorization", "Connection", "Keep-Alive", "TE", "Trailer",
	"Transfer-Encoding", "Upgrade",
}

// recordPlanter answers every Claim with a completed record for the same
// request whose stored response is resp, as a store written by another
// process with a longer allow-list, or an older version, might.
type recordPlanter struct {
	store.Store
	resp *store.Response
}

func (s recordPlanter) Claim(_ context.Context, _, fp, _ string, _ time.Duration) (store.Record, bool, error) {
	return store.Record{State: store.StateCompleted, Fingerprint: fp, Response: s.resp, TTL: time.Hour}, false, nil
}

// TestReplayFiltersStoredHeaders: the headers of a stored response are
// checked again when it is replayed: credentials, cookies, hop-by-hop
// headers and headers off the allow-list are dropped even if the store
// holds them, while allow-listed ones such as Content-Type are replayed.
func TestReplayFiltersStoredHeaders(t *testing.T) {
	header := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/payments/1"},
		"X-Request-Id": {"req-1"},
		"X-Internal":   {"secret"},
	}
	for _, name := range neverStoredHeaders {
		header[http.CanonicalHeaderKey(name)] = []string{"stored-" + name}
	}
	s := recordPlanter{Store: store.NewMemory(), resp: &store.Response{
		Status: http.StatusCreated, Header: header, Body: []byte(`{"id":1}`),
	}}
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayHeaders("X-Request-Id"))(h)

	resp := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, `{"id":1}`, readAll(t, resp))
	require.Zero(t, h.runs.Load())
	require.Equal(t, []string{"application/json"}, resp.Header.Values("Content-Type"))
	require.Equal(t, []string{"/payments/1"}, resp.Header.Values("Location"))
	require.Equal(t, []string{"req-1"}, resp.Header.Values("X-Request-Id"))
	require.Empty(t, resp.Header.Values("X-Internal"), "off the allow-list")
	for _, name := range neverStoredHeaders {
		require.Empty(t, resp.Header.Values(name), name)
	}
}
