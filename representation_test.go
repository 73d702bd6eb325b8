package idempotency_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestReplayKeepsRepresentationHeaders: the headers that say how to read
// the stored bytes are replayed with them: Content-Encoding of a body a
// compressing middleware inside this one gzipped, Content-Range of a 206
// from http.ServeContent, Content-Disposition of a download.
func TestReplayKeepsRepresentationHeaders(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"id":"pay_1"}`))
	require.NoError(t, zw.Close())
	compressed := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Disposition", `attachment; filename="pay_1.json"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(gz.Bytes())
	}))
	first := post(compressed, "zipped", "{}")
	replay := post(compressed, "zipped", "{}")
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, readAll(t, first), readAll(t, replay))
	for _, name := range []string{"Content-Encoding", "Content-Disposition"} {
		require.Equal(t, first.Header.Values(name), replay.Header.Values(name), name)
	}

	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ranged := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "receipt.txt", modified, strings.NewReader("receipt body"))
	}))
	firstPart := func(r *http.Request) { r.Header.Set("Range", "bytes=0-6") }
	first = post(ranged, "ranged", "{}", firstPart)
	replay = post(ranged, "ranged", "{}", firstPart)
	require.Equal(t, http.StatusPartialContent, replay.StatusCode)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "bytes 0-6/12", replay.Header.Get("Content-Range"))
	require.Equal(t, readAll(t, first), readAll(t, replay))
}

// silentBody announces nothing and fails at once, as a client that sent
// headers and no body bytes before going away.
type silentBody struct{}

func (silentBody) Read([]byte) (int, error) { return 0, errors.New("client sent nothing") }
func (silentBody) Close() error             { return nil }

// TestAnnouncedLengthIsNotPreallocated: a request that announces a large
// Content-Length and sends nothing costs the server little memory, however
// large the body limit.
func TestAnnouncedLengthIsNotPreallocated(t *testing.T) {
	mw := idempotency.New(idempotency.WithMaxBodyBytes(1 << 30))(&paymentHandler{})
	r := httptest.NewRequest(http.MethodPost, "/payments", nil)
	r.Header.Set("Idempotency-Key", "k")
	r.Body, r.ContentLength = silentBody{}, 256<<20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusBadRequest, w.Code, "an unreadable body")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for a body of 256 MiB announced, 0 sent")
}
