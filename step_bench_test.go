package idempotency_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

// BenchmarkStep measures first requests on the memory store whose handler
// runs no step (none, as BenchmarkMiddleware/first), or two (two), and
// reports the store calls each request makes, lease renewals aside: a
// claim, a completion, and one SaveStep per step.
func BenchmarkStep(b *testing.B) {
	for _, tc := range []struct {
		name  string
		steps int
	}{{"none", 0}, {"two", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			s := &countingStore{Store: store.NewMemory(store.WithMaxRecords(1<<20), store.WithMaxBytes(1<<30))}
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, name := range []string{"charge", "ledger"}[:tc.steps] {
					if _, err := idempotency.Step(r.Context(), name, func(context.Context) (int, error) { return 1, nil }); err != nil {
						b.Fatal(err)
					}
				}
				idempotencytest.EchoJSON(w, r)
			})
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithRetention(idempotencytest.SteadyRetention))(h)
			s.calls.Store(0)
			idempotencytest.ServeKeys(b, mw, idempotencytest.NewKey)
			b.ReportMetric(float64(s.calls.Load())/float64(b.N), "store-calls/op")
			b.ReportMetric(float64(2+tc.steps), "target-store-calls/op")
		})
	}
}
