package pgstore_test

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/stalltest"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// TestStall: two workers, each with a pool of its own through one proxy
// to DATABASE_URL, answer every request within the store timeout while the
// proxy stalls, and run no payment twice (see stalltest.Run).
func TestStall(t *testing.T) {
	idle, proxy, table := partitionable(t)
	cfg := idle.Config()
	cfg.MinConns = cfg.MaxConns // full from the start, so that growth is not counted as a leak
	var stores [2]store.Store
	for i := range stores {
		pool := pgstore.Connect(t, cfg)
		t.Cleanup(pool.Close)
		s := pgstore.New(pool, pgstore.WithTable(table))
		t.Cleanup(s.Close)
		stores[i] = s
	}
	stalltest.Run(t, proxy, stores)
}
