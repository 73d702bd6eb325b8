package otelidempotency_test

import (
	"net/http/httptest"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/otelidempotency"
)

// BenchmarkObserver measures the adapter's cost on a real SDK meter, side
// by side: first (a new key each iteration) and replay (a duplicate of a
// completed request), each without an observer (bare) and with the
// adapter (otel). The target: otel at most 1 µs more than bare. first's
// store is in its steady state, as the root package's BenchmarkMiddleware
// runs it: records expire as fast as new keys arrive, so the heap stays the
// same size and no sub-benchmark inherits another's garbage.
func BenchmarkObserver(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	observed := idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	for _, bench := range []struct {
		name string
		opts []idempotency.Option
	}{{"bare", nil}, {"otel", []idempotency.Option{observed}}} {
		b.Run("first/"+bench.name, func(b *testing.B) {
			idempotencytest.ServeKeys(b, idempotencytest.Steady(idempotencytest.EchoJSON, bench.opts...), idempotencytest.NewKey)
		})
		b.Run("replay/"+bench.name, func(b *testing.B) {
			mw := idempotency.New(bench.opts...)(idempotencytest.EchoJSON)
			mw.ServeHTTP(httptest.NewRecorder(), idempotencytest.Request(-1))
			idempotencytest.ServeKeys(b, mw, func(int) int { return -1 })
		})
	}
}
