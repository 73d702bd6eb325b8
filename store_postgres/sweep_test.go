package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// fill inserts expired records, in flight with a lease that ended two days
// ago (past the default abandoned retention) or completed with a retention
// that ended a minute ago, and live ones, keyed prefix-0, prefix-1...
func fill(t *testing.T, s *Store, prefix string, expired, live int) {
	t.Helper()
	_, err := s.pool.Exec(context.Background(), `
INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, status, expires_at)
SELECT sha256(convert_to($1 || '-' || i, 'UTF8')), 'fp', 1 + i % 2, 't', 1,
       CASE WHEN i % 2 = 1 THEN 200 END,
       now() + CASE WHEN i >= $2 THEN interval '1 hour'
                    WHEN i % 2 = 0 THEN interval '-2 days'
                    ELSE interval '-1 minute' END
FROM generate_series(0, $2::int + $3::int - 1) AS i`, prefix, expired, live)
	require.NoError(t, err)
}

func count(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+s.name).Scan(&n))
	return n
}

func TestDeleteExpiredInBatches(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	fill(t, s, "k", 25, 10)

	var got []int
	for {
		n := mustDeleteExpired(t, s, 10)
		got = append(got, n)
		if n < 10 {
			break
		}
	}
	assert.Equal(t, []int{10, 10, 5}, got)
	assert.Equal(t, 10, count(t, s), "live records stay")

	_, err := s.DeleteExpired(ctx, 0)
	assert.EqualError(t, err, "pgstore: DeleteExpired expects batch >= 1")
}

func TestDeleteExpiredSkipsLockedRows(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	fill(t, s, "k", 20, 0)

	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	rows, err := tx.Query(ctx, "SELECT key FROM "+s.name+" ORDER BY key LIMIT 5 FOR UPDATE")
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())

	// Were the locked rows waited for, this would block until the timeout.
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := s.DeleteExpired(waitCtx, 100)
	require.NoError(t, err)
	assert.Equal(t, 15, n, "every expired row but the 5 locked ones")
}

func TestSweepersShareOneTable(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	s := newTestStore(t, WithLogger(logger))
	fill(t, s, "k", 3000, 40)

	ctx, cancel := context.WithCancel(context.Background())
	var stopped []<-chan struct{}
	for range 4 {
		stopped = append(stopped, s.StartSweeper(ctx, 20*time.Millisecond))
	}
	// Claims go on while the sweepers run; new expired rows keep coming.
	fill(t, s, "late", 200, 0)
	require.Eventually(t, func() bool { return count(t, s) == 40 }, 30*time.Second, 50*time.Millisecond)
	cancel()
	for _, done := range stopped {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, logs.String(), "no sweeper failed")
}

// TestSweepReadsEveryPageRange: one sweep round removes a backlog spread
// over many more pages than one range of the sweep reads, in more rows
// than one batch, and keeps the live rows among them.
func TestSweepReadsEveryPageRange(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	fill(t, s, "k", 25*sweepBatch, 100)
	var pages int64
	require.NoError(t, s.pool.QueryRow(context.Background(), s.sql.pages).Scan(&pages))
	require.Greater(t, pages, int64(2*sweepPages), "the rows fill more than two ranges")

	s.sweep(context.Background())
	assert.Equal(t, 100, count(t, s), "every expired row is removed, every live one kept")
}

// TestSweepKeepsAbandonedRows: an in-flight row whose lease lapsed, or
// that its owner released, is kept for the abandoned retention, so the
// takeover and the claim after the release get higher fencing numbers
// however often the sweeper runs; after it, the row is swept.
func TestSweepKeepsAbandonedRows(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, WithAbandonedRetention(time.Second))
	crashed := mustClaim(t, s, "pay", "fp", "crashed", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)

	require.Zero(t, mustDeleteExpired(t, s, 100), "a lapsed lease is kept for the abandoned retention")
	second := mustClaim(t, s, "pay", "fp", "second", time.Minute)
	require.Greater(t, second.Owner.Fence, crashed.Owner.Fence, "the takeover after a sweep")

	require.NoError(t, s.Release(context.Background(), "pay", second.Owner))
	require.Zero(t, mustDeleteExpired(t, s, 100), "a released row is kept for the abandoned retention")
	third := mustClaim(t, s, "pay", "fp", "third", 50*time.Millisecond)
	require.Greater(t, third.Owner.Fence, second.Owner.Fence, "the claim after a release and a sweep")

	time.Sleep(1500 * time.Millisecond)
	require.Equal(t, 1, mustDeleteExpired(t, s, 100), "after the abandoned retention the row is swept")
}

func TestStartSweeperRejectsNegativeInterval(t *testing.T) {
	s := New(testPool(t))
	assert.PanicsWithValue(t, "pgstore: StartSweeper expects interval >= 0",
		func() { s.StartSweeper(context.Background(), -time.Second) })
}

// lockedWriter serialises writes from several sweepers' log lines.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestSweepDoesNotAbortSerializableClaims: with serializable as the
// connections' default isolation, a transactional claim that takes over a
// key just past its retention while a sweeper deletes that key's row must
// still commit. Were the sweeper's DELETE serializable too, the server
// would see read/write dependencies both ways and abort the claim at
// COMMIT, and the middleware would answer 503.
func TestSweepDoesNotAbortSerializableClaims(t *testing.T) {
	t.Parallel()
	_, s := isolatedStores(t, "serializable", 0)
	ctx := context.Background()
	for round := range 100 {
		key := fmt.Sprint("k-", round)
		old := mustClaim(t, s.Store, key, "fp", "old", time.Minute)
		require.NoError(t, s.Complete(ctx, key, old.Owner, &store.Response{Status: 201}, time.Millisecond))
		time.Sleep(3 * time.Millisecond) // the retention ends on the server's clock

		var wg sync.WaitGroup
		var sweepErr, commitErr error
		wg.Go(func() { _, sweepErr = s.DeleteExpired(ctx, 100) })
		wg.Go(func() {
			_, _, tx, err := s.BeginClaim(ctx, key, "fp", "retry")
			if err == nil && tx != nil {
				err = tx.Commit(ctx, &store.Response{Status: 201}, time.Hour)
			}
			commitErr = err
		})
		wg.Wait()
		require.NoError(t, sweepErr, "round %d", round)
		require.NoError(t, commitErr, "round %d", round)
	}
}
