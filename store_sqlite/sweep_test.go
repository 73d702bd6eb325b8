package sqlitestore

import (
	"context"
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
	_, err := s.db.Exec(onSQLiteClock(`
WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < ?2 + ?3)
INSERT INTO idempotency_keys (key, fingerprint, state, token, fence, status, expires_at, sweep_at)
SELECT ?1 || '-' || n, 'fp', 1 + n % 2, 't', 1, iif(n % 2 = 1, 200, NULL), e, e
FROM (SELECT n, NOW + CASE WHEN n >= ?2 THEN 3600000 WHEN n % 2 = 0 THEN -172800000 ELSE -60000 END AS e FROM i)`),
		prefix, expired, live)
	require.NoError(t, err)
}

func count(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.QueryRow(`SELECT count(*) FROM idempotency_keys`).Scan(&n))
	return n
}

func TestDeleteExpiredInBatches(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	fill(t, s, "k", 25, 10)
	var got []int
	for {
		n, err := s.DeleteExpired(context.Background(), 10)
		require.NoError(t, err)
		got = append(got, n)
		if n < 10 {
			break
		}
	}
	assert.Equal(t, []int{10, 10, 5}, got)
	assert.Equal(t, 10, count(t, s), "live records stay")

	_, err := s.DeleteExpired(context.Background(), 0)
	assert.EqualError(t, err, "sqlitestore: DeleteExpired expects batch >= 1")
}

// TestDeleteExpiredKeepsAbandonedAndTakenOverRows: an in-flight row whose
// lease ended is kept for the abandoned retention; once taken over, it is
// live again (though its sweep_at is behind), and kept.
func TestDeleteExpiredKeepsAbandonedAndTakenOverRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	old := mustClaim(t, s, "k", "old", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "an abandoned row stays for the abandoned retention")

	taken := mustClaim(t, s, "k", "new", time.Minute)
	assert.Greater(t, taken.Owner.Fence, old.Owner.Fence)
	short := New(s.db, WithAbandonedRetention(time.Millisecond))
	n, err = short.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "a row taken over is live")
	require.NoError(t, s.Complete(ctx, "k", taken.Owner, &store.Response{Status: 201}, time.Hour))

	abandoned := mustClaim(t, s, "gone", "t", time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	n, err = short.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "past the abandoned retention, the row goes")
	assert.ErrorIs(t, s.Renew(ctx, "gone", abandoned.Owner, time.Minute), store.ErrNotOwner)
}

func TestSweeperRemovesExpiredRows(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	fill(t, s, "k", 2500, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := s.StartSweeper(ctx, time.Hour)
	require.Eventually(t, func() bool { return count(t, s) == 3 }, 10*time.Second, 10*time.Millisecond,
		"the first round clears the whole backlog, batch after batch")
	cancel()
	<-done
	assert.PanicsWithValue(t, "sqlitestore: StartSweeper expects interval >= 0", func() { s.StartSweeper(ctx, -1) })
}
