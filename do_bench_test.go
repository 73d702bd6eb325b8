package idempotency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

// sendReceipt is the benchmarked job: it does almost nothing, so that what
// is measured is Do's own cost.
func sendReceipt(context.Context) ([]byte, error) { return []byte("sent"), nil }

// BenchmarkDo measures Do on the memory store against calling fn directly:
// first a new key each iteration, stored a key whose result is stored.
// Each reports its cost over fn's (ns-over-fn/op) beside its target. The
// first calls' results are kept for idempotencytest.SteadyRetention, and the store has
// reached its steady size before the clock starts, so that it neither
// fills up nor grows while measured; a call that fails fails the
// benchmark.
func BenchmarkDo(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "receipt-" + strconv.Itoa(i)
	}
	run := func(b *testing.B, ctx context.Context, s store.Store, key string, opts ...idempotency.DoOption) {
		if _, err := idempotency.Do(ctx, s, key, sendReceipt, opts...); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("first", func(b *testing.B) {
		s := store.NewMemory(store.WithMaxRecords(1 << 22))
		ctx := context.Background()
		// Reach the steady size first, as idempotencytest.Steady does for the
		// middleware: new keys for four retentions, so that records
		// expire as fast as they arrive and the store no longer grows.
		for n, start := 0, time.Now(); time.Since(start) < 4*idempotencytest.SteadyRetention; n++ {
			run(b, ctx, s, "warm-"+strconv.Itoa(n), idempotency.DoRetention(idempotencytest.SteadyRetention))
		}
		overFn(b, 1500, func(i int) {
			run(b, ctx, s, keys[i%len(keys)]+strconv.Itoa(i/len(keys)), idempotency.DoRetention(idempotencytest.SteadyRetention))
		})
	})
	b.Run("stored", func(b *testing.B) {
		s := store.NewMemory()
		ctx := context.Background()
		run(b, ctx, s, "receipt")
		overFn(b, 500, func(int) { run(b, ctx, s, "receipt") })
	})
}

// overFn times do for b.N iterations, and sendReceipt called directly as
// many times, and reports do's cost over the direct call with the target.
func overFn(b *testing.B, targetNs float64, do func(i int)) {
	b.ReportAllocs()
	ctx := context.Background()
	start := time.Now()
	for range b.N {
		_, _ = sendReceipt(ctx)
	}
	direct := time.Since(start)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		do(i)
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed()-direct)/float64(b.N), "ns-over-fn/op")
	b.ReportMetric(targetNs, "target-ns-over-fn")
}
