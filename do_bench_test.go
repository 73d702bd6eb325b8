package idempotency_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/internal/servetest"
	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// sendReceipt is the benchmarked job: it does almost nothing, so that what
// is measured is Do's own cost.
func sendReceipt(context.Context) ([]byte, error) { return []byte("sent"), nil }

// BenchmarkDo measures Do on the memory store against calling fn directly:
// first a new key each iteration, stored a key whose result is stored.
// Each reports its cost over fn's (ns-over-fn/op) beside its target. The
// first calls' results are kept for servetest.SteadyRetention, and the store has
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
		// Reach the steady size first, as servetest.Steady does for the
		// middleware: new keys for four retentions, so that records
		// expire as fast as they arrive and the store no longer grows.
		for n, start := 0, time.Now(); time.Since(start) < 4*servetest.SteadyRetention; n++ {
			run(b, ctx, s, "warm-"+strconv.Itoa(n), idempotency.DoRetention(servetest.SteadyRetention))
		}
		overFn(b, 1500, func(i int) {
			run(b, ctx, s, keys[i%len(keys)]+strconv.Itoa(i/len(keys)), idempotency.DoRetention(servetest.SteadyRetention))
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

// BenchmarkDoRedis counts Do's round trips to Redis, a first call and a
// stored one, beside their targets (2 and 1).
func BenchmarkDoRedis(b *testing.B) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		b.Skip("REDIS_URL is not set")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	defer client.Close()
	trips := &roundTrips{}
	client.AddHook(trips)
	s := redisstore.New(client)
	ctx := context.Background()
	prefix := "bench-do-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	short := idempotency.DoRetention(time.Minute)
	for _, bc := range []struct {
		name   string
		target float64
		key    func(i int) string
	}{
		{"first", 2, func(i int) string { return prefix + strconv.Itoa(i) }},
		{"stored", 1, func(int) string { return prefix + "stored" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, _ = idempotency.Do(ctx, s, prefix+"stored", sendReceipt, short)
			trips.n.Store(0)
			i := 0
			for b.Loop() {
				if _, err := idempotency.Do(ctx, s, bc.key(i), sendReceipt, short); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(trips.n.Load())/float64(b.N), "roundtrips/op")
			b.ReportMetric(bc.target, "target-roundtrips")
		})
	}
}

// roundTrips is a go-redis hook that counts the commands and pipelines
// sent, each one round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}
