package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConformance runs the shared store suite against standalone Redis and
// against a Redis Cluster.
func TestConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		storetest.Run(t, func(t *testing.T) store.Store {
			s, _ := newStore(t, client)
			return s
		})
	})
}
