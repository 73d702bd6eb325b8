package mysqlstore

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/stalltest"
)

// TestStall: two workers, each with a pool of its own through one proxy
// to MYSQL_DSN's server, answer every request within the store timeout
// while the proxy stalls, and run no payment twice (see stalltest.Run).
func TestStall(t *testing.T) {
	table, proxy, through := partitionable(t)
	var stores [2]store.Store
	for i := range stores {
		db := through(10)
		fillPool(t, db)
		stores[i] = New(db, WithTable(table))
	}
	stalltest.Run(t, proxy, stores)
}
