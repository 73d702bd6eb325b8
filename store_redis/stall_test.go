package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/stalltest"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestStall: two workers, each with a client of its own through one proxy
// to REDIS_URL, answer every request within the store timeout while the
// proxy stalls, and run no payment twice (see stalltest.Run). The claims'
// pipelines run on the main pool, which is full from the start: go-redis's
// pipeline pool never pre-dials, so its growth would count as a leak.
func TestStall(t *testing.T) {
	_, prefix := newStore(t, standalone(t))
	var proxy *tcpproxy.Proxy
	var stores [2]store.Store
	for i := range stores {
		client := standaloneWith(t, func(opts *redis.Options) {
			if proxy == nil {
				proxy = startProxy(t, opts.Addr)
			}
			opts.Addr = proxy.Addr()
			opts.PoolSize, opts.MinIdleConns = 8, 8
			opts.PipelinePoolSize = -1
		})
		stores[i] = redisstore.New(client, redisstore.WithPrefix(prefix))
	}
	stalltest.Run(t, proxy, stores)
}
