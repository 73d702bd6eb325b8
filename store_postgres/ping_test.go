package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// TestPing: while the link to Postgres stalls, a ping fails by its
// deadline; once the link flows again, pings answer, plain and
// transactional stores alike.
func TestPing(t *testing.T) {
	pool, proxy, table := partitionable(t)
	plain, tx := pgstore.New(pool, pgstore.WithTable(table)), pgstore.NewTx(pool, pgstore.WithTable(table))
	require.NoError(t, plain.Ping(t.Context()))
	require.NoError(t, tx.Ping(t.Context()))

	proxy.Stall()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	err := plain.Ping(ctx)
	t.Logf("the ping through the stall failed after %v", time.Since(started))
	require.Error(t, err)
	require.ErrorContains(t, err, "pgstore: ping")

	proxy.Resume()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return plain.Ping(ctx) == nil
	}, 5*time.Second, 20*time.Millisecond, "a ping answers after the stall")
}
