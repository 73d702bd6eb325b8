package idempotencytest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// BenchBody is a 1 KiB JSON payment request, the body of every Request.
var BenchBody = func() []byte {
	b := []byte(`{"amount":100,"currency":"EUR","note":"`)
	b = append(b, bytes.Repeat([]byte("x"), 1024-len(b)-2)...)
	return append(b, `"}`...)
}()

// EchoJSON answers 201 with the request body as JSON.
var EchoJSON = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
})

// Request returns a POST of BenchBody with key number n, built alike for
// every benchmark so bare and wrapped handlers differ by the wrapping
// alone.
func Request(n int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(BenchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(n))
	return r
}

// NewKey gives each iteration a new key.
func NewKey(i int) int { return i }

// ServeKeys serves b.N requests through h, the i-th with key number
// keyNumber(i), each to an emptied recorder. Keys are built as used: a
// slice of b.N would be scanned at every GC cycle.
func ServeKeys(b *testing.B, h http.Handler, keyNumber func(i int) int) {
	b.ReportAllocs()
	w := httptest.NewRecorder()
	b.ResetTimer()
	for i := range b.N {
		w.Body.Reset()
		clear(w.Header())
		h.ServeHTTP(w, Request(keyNumber(i)))
	}
}

// SteadyRetention is Steady's retention, short so records expire during a
// run.
const SteadyRetention = 200 * time.Millisecond

// Steady returns the middleware with opts around h on a memory store at
// its steady size: it has served keys below -1 for four retentions, so
// records expire as fast as new ones arrive.
func Steady(h http.Handler, opts ...idempotency.Option) http.Handler {
	mem := store.NewMemory(store.WithMaxRecords(1<<20), store.WithMaxBytes(1<<30))
	opts = append(opts, idempotency.WithStore(mem), idempotency.WithRetention(SteadyRetention))
	mw := idempotency.New(opts...)(h)
	w := httptest.NewRecorder()
	for n, start := -2, time.Now(); time.Since(start) < 4*SteadyRetention; n-- {
		w.Body.Reset()
		clear(w.Header())
		mw.ServeHTTP(w, Request(n))
	}
	return mw
}
