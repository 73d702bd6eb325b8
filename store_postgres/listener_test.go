package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// listenerPID is the backend of s's listening connection, 0 while it has
// none.
func listenerPID(s *Store) uint32 {
	s.listener.mu.Lock()
	defer s.listener.mu.Unlock()
	if s.listener.state != listenerUp {
		return 0
	}
	return s.listener.pid
}

// TestListenerReconnects: when the server terminates the listener's
// connection, its watchers are woken (their marks went with it), and the
// listener connects again: a later watch is woken by its key's completion.
func TestListenerReconnects(t *testing.T) {
	s := closedFirst(t, newTestStore(t))
	mustClaim(t, s, "before", "fp", "t", time.Minute)
	before := storetest.MustWatch(t, s, "before")
	pid := listenerPID(s)
	require.NotZero(t, pid)
	var terminated bool
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated)
	require.True(t, storetest.ClosedWithin(before, storetest.WakeWithin), "woken by the loss of the listener's connection")

	owner := mustClaim(t, s, "after", "fp", "t", time.Minute).Owner
	var after <-chan struct{}
	require.Eventually(t, func() bool {
		changed, stop, err := s.Watch(t.Context(), "after")
		if err != nil {
			return false
		}
		t.Cleanup(stop)
		after = changed
		return true
	}, storetest.WakeWithin, 10*time.Millisecond, "the listener connects again")
	require.NotEqual(t, pid, listenerPID(s), "a new connection")
	require.False(t, storetest.ClosedWithin(after, storetest.QuietFor), "woken while the key is in flight")
	require.NoError(t, s.Complete(context.Background(), "after", owner, &store.Response{Status: 201}, time.Hour))
	require.True(t, storetest.ClosedWithin(after, storetest.WakeWithin), "woken by the completion, on the new connection")
}

// TestCloseEndsWatches: Close wakes the watchers, closes the listener's
// connection, and makes Watch fail; the store keeps serving its other
// methods.
func TestCloseEndsWatches(t *testing.T) {
	s := newTestStore(t)
	mustClaim(t, s, "k", "fp", "t", time.Minute)
	changed := storetest.MustWatch(t, s, "k")
	pid := listenerPID(s)
	s.Close()
	require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by Close")
	require.Eventually(t, func() bool {
		var alive bool
		require.NoError(t, s.pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive))
		return !alive
	}, storetest.WakeWithin, 10*time.Millisecond, "the listener's connection is closed")
	_, _, err := s.Watch(t.Context(), "k")
	require.ErrorIs(t, err, errClosed)
	s.Close()
	mustClaim(t, s, "other", "fp", "t", time.Minute)
}

// TestStopReleasesTheMark: the watch locks of stopped watches, woken or
// not, are released, so that later completions notify nobody.
func TestStopReleasesTheMark(t *testing.T) {
	s := closedFirst(t, newTestStore(t))
	ctx := context.Background()
	owner := mustClaim(t, s, "k", "fp", "t", time.Minute).Owner
	var stops []func()
	for range 3 {
		_, stop, err := s.Watch(ctx, "k")
		require.NoError(t, err)
		stops = append(stops, stop)
	}
	pid := listenerPID(s)
	locks := func() int {
		var n int
		require.NoError(t, s.pool.QueryRow(ctx,
			`SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'`, pid).Scan(&n))
		return n
	}
	require.Equal(t, 1, locks(), "the watches hold the key's watch lock")
	stops[0]()
	require.NoError(t, s.Complete(ctx, "k", owner, &store.Response{Status: 201}, time.Hour))
	for _, stop := range stops[1:] {
		stop()
	}
	require.Eventually(t, func() bool { return locks() == 0 }, storetest.WakeWithin, 10*time.Millisecond, "every hold released")
}

// TestListenerIgnoresThePoolsCancelRequests: a pool configured to end a
// statement whose context ends by a cancel request, and only an hour later
// by the connection's deadline, does not make the listener's waits slow to
// interrupt: a cancel request does not end a wait (the idle server ignores
// it), so each watch after the first would wait that hour.
func TestListenerIgnoresThePoolsCancelRequests(t *testing.T) {
	p := ownPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Hour}
		}
	})
	s := New(p, WithTable(closedFirst(t, newTestStore(t)).table))
	t.Cleanup(s.Close)
	mustClaim(t, s, "k", "fp", "t", time.Minute)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), storetest.WakeWithin)
		_, stop, err := s.Watch(ctx, "k")
		cancel()
		require.NoError(t, err, "watch %d", i)
		stop()
	}
}

// TestListenerRunsThePoolsAfterConnect: a pool whose AfterConnect sets the
// search_path to the schema the store's table is in (the store names no
// schema) gives the listener the same path, so its watches find the table
// and are woken by the completion.
func TestListenerRunsThePoolsAfterConnect(t *testing.T) {
	schema := testTable(t)
	_, err := testPool(t).Exec(context.Background(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = testPool(t).Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	p := ownPool(t, func(cfg *pgxpool.Config) {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET search_path TO "+schema)
			return err
		}
	})
	s := New(p, WithTable(testTable(t)))
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(s.Close)

	owner := mustClaim(t, s, "k", "fp", "t", time.Minute).Owner
	changed := storetest.MustWatch(t, s, "k")
	require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "woken while the key is in flight")
	require.NoError(t, s.Complete(context.Background(), "k", owner, &store.Response{Status: 201}, time.Hour))
	require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the completion")
}
