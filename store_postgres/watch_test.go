package pgstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	"github.com/seed43327c4c/idempotency/store/storetest/waitbench"
)

// TestWatchConformance runs storetest.RunWatch against each of
// plainStores, each store closed (its listener stopped) before its table
// is dropped.
func TestWatchConformance(t *testing.T) {
	for _, c := range plainStores {
		t.Run(c.name, func(t *testing.T) {
			storetest.RunWatch(t, func(t *testing.T) store.Watcher { return closedFirst(t, c.newStore(t)) })
		})
	}
}

// TestWatchTransactionalClaim: a key held by an open transaction is in
// flight for its watcher, who is woken by the Commit and not by a
// rollback, after which the key is free.
func TestWatchTransactionalClaim(t *testing.T) {
	for _, c := range []struct {
		name  string
		end   func(tx store.Tx) error
		woken bool
	}{
		{"Commit", func(tx store.Tx) error {
			return tx.Commit(context.Background(), &store.Response{Status: 201}, time.Hour)
		}, true},
		{"Rollback", func(tx store.Tx) error { return tx.Rollback(context.Background()) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := closedFirst(t, newTestTxStore(t))
			_, tx := mustBeginClaim(t, s, "k", "fp", "1")
			changed := storetest.MustWatch(t, s.Store, "k")
			require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "woken while the transaction is open")
			require.NoError(t, c.end(tx))
			if c.woken {
				require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the Commit")
				return
			}
			require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "woken while the transaction was rolled back")
			mustClaim(t, s.Store, "k", "fp", "t", time.Minute)
		})
	}
}

// TestWatchStateLeavesNoClaimLock: the listener reads a watched key's
// state in a batch, one implicit transaction that may last until a later
// watch's lock is granted. The read leaves no hold of the key's claim lock
// behind it, so a transactional claim of the key meanwhile wins instead of
// being told that the key is in flight.
func TestWatchStateLeavesNoClaimLock(t *testing.T) {
	s := closedFirst(t, newTestTxStore(t))
	batch, err := s.pool.Begin(t.Context()) // as the listener's batch runs
	require.NoError(t, err)
	t.Cleanup(func() { _ = batch.Rollback(context.Background()) })
	row := rowKey("k")
	var inFlight bool
	require.NoError(t, batch.QueryRow(t.Context(), s.sql.watchState, row, lockHash(row)).Scan(&inFlight))
	require.False(t, inFlight, "a key nobody holds")
	mustBeginClaim(t, s, "k", "fp", "1")
}

// TestWatchRacingCompletion: watches that race the completion of their
// key, 50 keys at once, are all woken, whichever comes first: the watch
// lock and the state read that follows it leave no gap for a completion.
func TestWatchRacingCompletion(t *testing.T) {
	s := closedFirst(t, newTestStore(t))
	const keys = 50
	owners := make([]store.Lease, keys)
	for i := range owners {
		owners[i] = mustClaim(t, s, fmt.Sprint("k", i), "fp", "t", time.Minute).Owner
	}
	watches := make([]<-chan struct{}, keys)
	errs := make([]error, 2*keys)
	storetest.Together(2*keys, func(i int) {
		key := fmt.Sprint("k", i/2)
		if i%2 == 0 {
			errs[i] = s.Complete(context.Background(), key, owners[i/2], &store.Response{Status: 201}, time.Hour)
			return
		}
		changed, stop, err := s.Watch(context.Background(), key)
		if err == nil {
			t.Cleanup(stop)
		}
		watches[i/2], errs[i] = changed, err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, changed := range watches {
		require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the completion of k%d", i)
	}
}

// TestNotifyOnlyWhenWatched: completing, releasing or committing a key
// nobody watches sends no notification on the table's channel; with a
// watcher, it sends one, naming the key.
func TestNotifyOnlyWhenWatched(t *testing.T) {
	ctx, resp := context.Background(), &store.Response{Status: 201}
	for _, c := range []struct {
		name string
		// hold claims key and returns what takes it out of flight.
		hold func(t *testing.T, s *TxStore, key string) (end func() error)
	}{
		{"Complete", func(t *testing.T, s *TxStore, key string) func() error {
			owner := mustClaim(t, s.Store, key, "fp", "t", time.Minute).Owner
			return func() error { return s.Complete(ctx, key, owner, resp, time.Hour) }
		}},
		{"Release", func(t *testing.T, s *TxStore, key string) func() error {
			owner := mustClaim(t, s.Store, key, "fp", "t", time.Minute).Owner
			return func() error { return s.Release(ctx, key, owner) }
		}},
		{"Commit", func(t *testing.T, s *TxStore, key string) func() error {
			_, tx := mustBeginClaim(t, s, key, "fp", key)
			return func() error { return tx.Commit(ctx, resp, time.Hour) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := closedFirst(t, newTestTxStore(t))
			notes := listen(t, s.Store)
			require.NoError(t, c.hold(t, s, "alone")())
			select {
			case n := <-notes:
				t.Fatalf("notified %q with nobody watching", n)
			case <-time.After(storetest.QuietFor):
			}

			end := c.hold(t, s, "watched")
			changed := storetest.MustWatch(t, s.Store, "watched")
			require.NoError(t, end())
			require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by %s", c.name)
			select {
			case n := <-notes:
				assert.Equal(t, hex.EncodeToString(rowKey("watched")), n)
			case <-time.After(storetest.WakeWithin):
				t.Fatal("no notification with a watcher")
			}
			select {
			case n := <-notes:
				t.Fatalf("a second notification %q", n)
			case <-time.After(storetest.QuietFor):
			}
		})
	}
}

// listen opens a connection of its own that listens on s's channel and
// returns the payloads it receives, until the test ends.
func listen(t *testing.T, s *Store) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.ConnectConfig(ctx, testConfig(t).ConnConfig)
	require.NoError(t, err)
	var channel string
	require.NoError(t, conn.QueryRow(ctx, s.sql.channel).Scan(&channel))
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	notes, ended := make(chan string, 10), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			notes <- n.Payload
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
		_ = conn.Close(context.Background())
	})
	return notes
}

// BenchmarkWaitWake measures, through the middleware, how soon a request
// waiting for its duplicate in flight is answered after the duplicate
// completes (see waitbench.Run).
func BenchmarkWaitWake(b *testing.B) {
	waitbench.Run(b, closedFirst(b, newTestStore(b)))
}
