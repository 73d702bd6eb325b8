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

// TestSweepBuriesThenDeletes: with tombstones, the sweeper turns a done row
// past its retention into a tombstone (its response dropped), which a
// claim answers as expired, and deletes it once the tombstone's time ends.
func TestSweepBuriesThenDeletes(t *testing.T) {
	s := newTestStore(t, WithTombstones(time.Second))
	ctx := t.Context()
	owner := mustClaim(t, s, "paid", "t", time.Minute)
	require.NoError(t, s.Complete(ctx, "paid", owner.Owner, &store.Response{Status: 201, Body: make([]byte, 10_000)}, time.Millisecond))
	time.Sleep(10 * time.Millisecond)

	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "one row buried")
	var bodies int
	require.NoError(t, s.db.QueryRow(`SELECT count(*) FROM idempotency_keys WHERE body IS NOT NULL OR header IS NOT NULL`).Scan(&bodies))
	assert.Zero(t, bodies, "the tombstone keeps no response")
	rec, claimed, err := s.Claim(ctx, "paid", "fp", "late", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateExpired, rec.State)
	n, err = s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "the tombstone stays for its time")

	time.Sleep(time.Second)
	n, err = s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "deleted once the tombstone's time ended")
	assert.Zero(t, count(t, s))
}

// BenchmarkTombstoneBytes reports the bytes of the file, table and
// indexes, that each of 100 000 tombstones takes, shaped as the sweeper
// leaves them: a key hash of 64 hex digits, a fingerprint of 16 (the
// middleware's), a token of 32, status, fence and times, no response.
func BenchmarkTombstoneBytes(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		s := newTestStore(b)
		empty := fileBytes(b, s)
		_, err := s.db.Exec(onSQLiteClock(`
WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n + 1 < ?1)
INSERT INTO idempotency_keys (key, fingerprint, state, token, fence, status, expires_at, sweep_at, completed_at)
SELECT lower(hex(randomblob(32))), CAST(lower(hex(randomblob(8))) AS BLOB), 2, CAST(lower(hex(randomblob(16))) AS BLOB),
       1, 201, NOW, NOW + 3600000, NOW - 86400000
FROM i`), n)
		require.NoError(b, err)
		b.ReportMetric(float64(fileBytes(b, s)-empty)/n, "bytes/tombstone")
	}
}

// fileBytes returns the bytes of s's file in use after a VACUUM.
func fileBytes(b *testing.B, s *Store) int64 {
	b.Helper()
	_, err := s.db.Exec(`VACUUM`)
	require.NoError(b, err)
	var pages, free, size int64
	require.NoError(b, s.db.QueryRow(`SELECT (SELECT * FROM pragma_page_count), (SELECT * FROM pragma_freelist_count), (SELECT * FROM pragma_page_size)`).
		Scan(&pages, &free, &size))
	return (pages - free) * size
}
