package mysqlstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rows returns how many rows s's table holds.
func rows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.QueryRow(s.sql.rewrite.Replace("SELECT COUNT(*) FROM `idempotency_keys`")).Scan(&n))
	return n
}

// TestDeleteExpired: done rows past their retention and in-flight rows
// past the abandoned retention go; live rows, rows a transaction holds and
// lapsed leases within the abandoned retention stay.
func TestDeleteExpired(t *testing.T) {
	s := newTestStore(t, WithAbandonedRetention(time.Hour))
	tx := &TxStore{Store: s}
	ctx := context.Background()
	done := mustClaim(t, s, "done", "fp", longLease)
	require.NoError(t, s.Complete(ctx, "done", done.Owner, nil, time.Millisecond))
	mustClaim(t, s, "lapsed", "fp", time.Millisecond)
	mustClaim(t, s, "live", "fp", longLease)
	_, _, held, err := tx.BeginClaim(ctx, "held", "fp", newToken())
	require.NoError(t, err)
	defer func() { require.NoError(t, held.Rollback(ctx)) }()
	time.Sleep(10 * time.Millisecond)

	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the done row")
	require.Equal(t, 3, rows(t, s))

	short := New(s.db, WithTable(s.table), WithAbandonedRetention(time.Millisecond))
	n, err = short.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the lapsed lease, not the held row")
	_, err = s.DeleteExpired(ctx, 0)
	require.ErrorContains(t, err, "batch >= 1")
}

// TestSweepersAtOnce: sweepers racing on one table delete every expired
// row once between them, in batches, without error.
func TestSweepersAtOnce(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	const keys = 300
	for i := range keys {
		rec := mustClaim(t, s, fmt.Sprint("k", i), "fp", longLease)
		require.NoError(t, s.Complete(ctx, fmt.Sprint("k", i), rec.Owner, nil, time.Millisecond))
	}
	time.Sleep(10 * time.Millisecond)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for range 4 {
		wg.Go(func() {
			for {
				n, err := s.DeleteExpired(ctx, 25)
				require.NoError(t, err)
				mu.Lock()
				total += n
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, keys, total)
	require.Zero(t, rows(t, s))
}

// TestStartSweeper: the sweeper removes expired rows at once and stops
// when its context ends.
func TestStartSweeper(t *testing.T) {
	s := newTestStore(t)
	rec := mustClaim(t, s, "k", "fp", longLease)
	require.NoError(t, s.Complete(context.Background(), "k", rec.Owner, nil, time.Millisecond))
	time.Sleep(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := s.StartSweeper(ctx, time.Hour)
	require.Eventually(t, func() bool { return rows(t, s) == 0 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-stopped
}
