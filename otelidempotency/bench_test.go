package otelidempotency_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/otelidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// BenchmarkObserver measures the adapter's cost on a real SDK meter, side
// by side: first (a new key each iteration) and replay (a duplicate of a
// completed request), each without an observer (bare) and with the
// adapter (otel). The target: otel at most 1 µs more than bare. first's
// store is in its steady state, as the root package's BenchmarkMiddleware
// runs it: records expire as fast as new keys arrive, so the heap stays the
// same size and no sub-benchmark inherits another's garbage.
func BenchmarkObserver(b *testing.B) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	observed := idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	for _, bench := range []struct {
		name string
		opts []idempotency.Option
	}{{"bare", nil}, {"otel", []idempotency.Option{observed}}} {
		b.Run("first/"+bench.name, func(b *testing.B) {
			serveKeys(b, steady(echo, bench.opts...), func(i int) int { return i })
		})
		b.Run("replay/"+bench.name, func(b *testing.B) {
			mw := idempotency.New(bench.opts...)(echo)
			mw.ServeHTTP(httptest.NewRecorder(), benchRequest(-1))
			serveKeys(b, mw, func(int) int { return -1 })
		})
	}
}

var benchBody = bytes.Repeat([]byte("x"), 1024)

// steadyRetention is how long the store of steady keeps a record.
const steadyRetention = 200 * time.Millisecond

// steady returns the middleware around h on a memory store that has
// served new keys (numbered below -1) for several retentions, so that
// records now expire as fast as new ones arrive.
func steady(h http.Handler, opts ...idempotency.Option) http.Handler {
	mem := store.NewMemory(store.WithMaxRecords(1<<20), store.WithMaxBytes(1<<30))
	mw := idempotency.New(append(opts, idempotency.WithStore(mem), idempotency.WithRetention(steadyRetention))...)(h)
	for n, start := -2, time.Now(); time.Since(start) < 4*steadyRetention; n-- {
		mw.ServeHTTP(httptest.NewRecorder(), benchRequest(n))
	}
	return mw
}

// benchRequest returns a POST of benchBody with key number n.
func benchRequest(n int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(n))
	return r
}

// serveKeys serves b.N requests through h, the i-th with key number
// keyNumber(i).
func serveKeys(b *testing.B, h http.Handler, keyNumber func(i int) int) {
	b.ReportAllocs()
	w := httptest.NewRecorder()
	b.ResetTimer()
	for i := range b.N {
		w.Body.Reset()
		clear(w.Header())
		h.ServeHTTP(w, benchRequest(keyNumber(i)))
	}
}
