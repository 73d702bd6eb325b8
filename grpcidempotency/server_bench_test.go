package grpcidempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed43327c4c/idempotency/grpcidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// BenchmarkReplay: a replay through the server interceptor beside a plain
// unary call of the same method over loopback, alternately, so that both
// see the same load. It reports each one's time and the interceptor's
// cost, the difference, per call.
func BenchmarkReplay(b *testing.B) {
	stores := map[string]func(b *testing.B) store.Store{
		"memory": func(*testing.B) store.Store { return store.NewMemory() },
		"redis": func(b *testing.B) store.Store {
			return redisStore(b, redisPrefix(b, redisClient(b)))
		},
	}
	for name, newStore := range stores {
		b.Run(name, func(b *testing.B) {
			s := newStore(b)
			plain := listen(b, &payments{}, nil)
			idem := serve(b, &payments{}, s)
			ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidempotency.KeyMetadata, "bench")
			req, err := structpb.NewStruct(map[string]any{"amount": 10})
			require.NoError(b, err)
			reply := new(structpb.Struct)
			require.NoError(b, idem.Invoke(ctx, chargeMethod, req, reply)) // recorded
			var plainTook, replayTook time.Duration
			calls := 0
			for b.Loop() {
				start := time.Now()
				if err := plain.Invoke(ctx, chargeMethod, req, reply); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := idem.Invoke(ctx, chargeMethod, req, reply, grpc.Header(new(metadata.MD))); err != nil {
					b.Fatal(err)
				}
				plainTook, replayTook = plainTook+mid.Sub(start), replayTook+time.Since(mid)
				calls++
			}
			perCall := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(calls) }
			b.ReportMetric(perCall(plainTook), "plain-ns/call")
			b.ReportMetric(perCall(replayTook), "replay-ns/call")
			b.ReportMetric(perCall(replayTook-plainTook), "interceptor-ns/call")
		})
	}
}
