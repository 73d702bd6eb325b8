package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestPing: a store answers its health call on every deployment.
func TestPing(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		require.NoError(t, redisstore.New(client).Ping(t.Context()))
	})
}

// TestPingThroughAStall: while the link to Redis stalls, a ping fails at
// its deadline; once the link flows again, pings answer.
func TestPingThroughAStall(t *testing.T) {
	var proxy *tcpproxy.Proxy
	client := standaloneWith(t, func(opts *redis.Options) {
		proxy = startProxy(t, opts.Addr)
		opts.Addr = proxy.Addr()
	})
	s := redisstore.New(client)
	require.NoError(t, s.Ping(t.Context()))

	proxy.Stall()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := s.Ping(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "redisstore: ping")

	proxy.Resume()
	eventually(t, "a ping answers after the stall", 5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return s.Ping(ctx) == nil
	})
}
