package idempotency_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

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
