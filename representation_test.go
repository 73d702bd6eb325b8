package idempotency_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

func (silentBody) Close() error { return nil }

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

// TestReplayedHeadersAreCopies: a middleware outside this one that changes
// a replayed header value in place changes that one response only, not
// the stored record that later duplicates get.
func TestReplayedHeadersAreCopies(t *testing.T) {
	mw := idempotency.New()(&paymentHandler{})
	scribbler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw.ServeHTTP(w, r)
		if values := w.Header()["Location"]; len(values) > 0 {
			values[0] = "/scribbled"
		}
	})
	post(scribbler, "k", "{}")
	post(scribbler, "k", "{}") // a replay, scribbled on after the middleware wrote it
	third := post(scribbler, "k", "{}")
	require.Equal(t, "true", third.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "/payments/1", post(mw, "k", "{}").Header.Get("Location"))
}

// TestOuterMaxBytesReaderIs413: a body cut off by an http.MaxBytesReader
// outside the middleware, with a limit below the middleware's, gets 413
// like a body over the middleware's own limit.
func TestOuterMaxBytesReaderIs413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 10)
		mw.ServeHTTP(w, r)
	})
	resp := post(outer, "k", `{"amount":1000,"currency":"eur"}`, func(r *http.Request) { r.ContentLength = -1 })
	requireProblem(t, resp, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.Zero(t, h.runs.Load())
}

// TestHeadOverHTTP2IsReplayed: with HEAD protected, a HEAD response whose
// handler writes a body over HTTP/2 (where net/http fails the body writes
// once the headers are sent) is complete for its client, and is replayed.
func TestHeadOverHTTP2IsReplayed(t *testing.T) {
	var runs atomic.Int64
	mw := idempotency.New(idempotency.WithMethods(http.MethodHead))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("first line\n"))
		_, _ = w.Write(bytes.Repeat([]byte("x"), 8000))
	}))
	srv := httptest.NewUnstartedServer(mw)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	head := func() (*http.Response, error) {
		req, err := http.NewRequest(http.MethodHead, srv.URL+"/receipt", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", "k")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return nil, err
		}
		return resp, resp.Body.Close()
	}
	first, err := head()
	require.NoError(t, err)
	require.Equal(t, "HTTP/2.0", first.Proto)
	require.Equal(t, http.StatusOK, first.StatusCode)
	// Over HTTP/2 the headers of a HEAD response can reach the client
	// before the handler returns and the key is completed, so a duplicate
	// may still find it in flight (409, no body to tell more).
	var second *http.Response
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := head()
		if assert.NoError(c, err) && assert.NotEqual(c, http.StatusConflict, resp.StatusCode) {
			second = resp
		}
	}, 2*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, second.StatusCode)
	require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, runs.Load())
}

// TestReplayKeepsSuppressedContentType: a handler that sets Content-Type to
// nil tells net/http to send none and not to sniff one; its replay sends
// none either, rather than a type net/http sniffs from the stored body.
func TestReplayKeepsSuppressedContentType(t *testing.T) {
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("<html><body>receipt</body></html>"))
	})))
	defer srv.Close()
	send := func() *http.Response {
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/receipts", strings.NewReader("{}"))
		require.NoError(t, err)
		r.Header.Set("Idempotency-Key", "untyped")
		resp, err := srv.Client().Do(r)
		require.NoError(t, err)
		return resp
	}
	first, replay := send(), send()
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Empty(t, first.Header.Values("Content-Type"), "the first response")
	require.Empty(t, replay.Header.Values("Content-Type"), "the replay")
	require.Equal(t, readAll(t, first), readAll(t, replay))
}
