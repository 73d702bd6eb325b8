package redisstore_test

import (
	"crypto/rand"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// benchGoroutines is how many goroutines share the store in
// BenchmarkClaimComplete; .ci/bench-redis gives redis-benchmark as many
// clients.
const benchGoroutines = 32

// BenchmarkClaimComplete measures what a first request costs the store:
// a Claim of a fresh key and a Complete with a small JSON response, from
// 32 goroutines sharing one store on REDIS_URL. It reports pairs/s; each
// pair is two EVALSHA commands. .ci/bench-redis sets it beside
// redis-benchmark running the claim script on the same server.
func BenchmarkClaimComplete(b *testing.B) {
	s, _ := newStore(b, standalone(b), redisstore.WithAbandonedRetention(time.Minute))
	resp := &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}`),
	}
	ctx := b.Context()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range benchGoroutines {
		wg.Go(func() {
			token := rand.Text()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				key := strconv.FormatInt(i, 10)
				rec, claimed, err := s.Claim(ctx, key, "fp", token, time.Minute)
				if err != nil || !claimed {
					b.Errorf("Claim(%q) = claimed %v, %v", key, claimed, err)
					return
				}
				if err := s.Complete(ctx, key, rec.Owner, resp, time.Minute); err != nil {
					b.Errorf("Complete(%q) = %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}
