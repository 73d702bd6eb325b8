package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	"github.com/seed43327c4c/idempotency/store/storetest/waitbench"
)

// TestWatchConformance runs storetest.RunWatch, each subtest on a file of
// its own, with the completions made by each kind of writer:
//
//   - "one handle": the watching store itself, which wakes its watchers
//     directly, its poller seeing the commits too;
//   - "direct wake-ups only": the same, with a poller that never looks,
//     so only the direct wake-ups can pass;
//   - "other handles": three *sql.DB handles of their own on the file, as
//     three processes would hold them: only the poller sees them;
//   - "another process": a helper process (see helperStore) on the file.
func TestWatchConformance(t *testing.T) {
	for _, c := range []struct {
		name     string
		newStore func(t *testing.T) store.Watcher
	}{
		{"one handle", func(t *testing.T) store.Watcher { return newTestStore(t) }},
		{"direct wake-ups only", func(t *testing.T) store.Watcher { return newDirectOnlyStore(t) }},
		{"other handles", func(t *testing.T) store.Watcher {
			path := testFile(t)
			return watchedOn(t, path, handlesOn(t, path, 3)...)
		}},
		{"another process", func(t *testing.T) store.Watcher {
			path := testFile(t)
			return watchedOn(t, path, startHelper(t, path))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storetest.RunWatch(t, c.newStore)
		})
	}
}

// newDirectOnlyStore returns a store whose poller never looks at its
// watched keys: its interval is an hour.
func newDirectOnlyStore(t *testing.T) *Store {
	t.Helper()
	s := newTestStore(t)
	s.pollEvery = time.Hour
	return s
}

// watchedSpread is a spread whose watches are made by watcher, a store on
// the same file through a *sql.DB of its own that makes none of the
// spread's calls: it learns of every change through its poller.
type watchedSpread struct {
	*spread
	watcher *Store
}

// watchedOn returns a watchedSpread of stores whose watcher is a store on
// path of its own.
func watchedOn(t testing.TB, path string, stores ...store.Store) *watchedSpread {
	t.Helper()
	return &watchedSpread{spread: &spread{stores: stores}, watcher: newTestStoreOn(t, path)}
}

func (w *watchedSpread) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return w.watcher.Watch(ctx, key)
}

// TestWatchOfAKeyNotInFlight: the watch of a key that is missing, done,
// released, or in flight under a lease that has ended is closed by the
// poller's first look, with no commit after the watch; one of a key in
// flight stays open.
func TestWatchOfAKeyNotInFlight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTestStore(t)
	completed := mustClaim(t, s, "completed", "t", time.Minute)
	require.NoError(t, s.Complete(ctx, "completed", completed.Owner, &store.Response{Status: 201}, time.Hour))
	unreplayable := mustClaim(t, s, "unreplayable", "t", time.Minute)
	require.NoError(t, s.Complete(ctx, "unreplayable", unreplayable.Owner, nil, time.Hour))
	released := mustClaim(t, s, "released", "t", time.Minute)
	require.NoError(t, s.Release(ctx, "released", released.Owner))
	mustClaim(t, s, "lapsed", "t", time.Millisecond)
	mustClaim(t, s, "in flight", "t", time.Minute)
	time.Sleep(10 * time.Millisecond) // past the lapsed lease

	for _, c := range []struct {
		key      string
		inFlight bool
	}{
		{"missing", false}, {"completed", false}, {"unreplayable", false}, {"released", false}, {"lapsed", false},
		{"in flight", true},
	} {
		t.Run(c.key, func(t *testing.T) {
			changed := storetest.MustWatch(t, s, c.key)
			if c.inFlight {
				require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "woken while in flight")
				return
			}
			require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the first look")
		})
	}
}

// TestWatchDirectWakeUp: the Complete or Release of a key by the store
// that watches it closes the channel before it returns, whatever its
// poller does (here: nothing).
func TestWatchDirectWakeUp(t *testing.T) {
	t.Parallel()
	s := newDirectOnlyStore(t)
	for _, c := range []struct {
		name string
		end  func(key string, owner store.Lease) error
	}{
		{"Complete", func(key string, owner store.Lease) error {
			return s.Complete(t.Context(), key, owner, &store.Response{Status: 201}, time.Hour)
		}},
		{"Release", func(key string, owner store.Lease) error { return s.Release(t.Context(), key, owner) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			owner := mustClaim(t, s, c.name, "t", time.Minute).Owner
			changed := storetest.MustWatch(t, s, c.name)
			require.NoError(t, c.end(c.name, owner))
			select {
			case <-changed:
			default:
				t.Fatal("not closed when it returned")
			}
		})
	}
}

// TestWatchNeedsTwoConnections: on a database of one connection, which
// the poller would take from the store's statements, Watch fails and the
// store keeps working.
func TestWatchNeedsTwoConnections(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	s.db.SetMaxOpenConns(1)
	owner := mustClaim(t, s, "k", "t", time.Minute).Owner
	_, stop, err := s.Watch(t.Context(), "k")
	require.ErrorIs(t, err, errOneConnection)
	require.Nil(t, stop)
	require.NoError(t, s.Complete(t.Context(), "k", owner, nil, time.Hour))
}

// TestWatchRacingCompletion: watches that race the completion of their
// key, 50 keys at once, are all woken, whichever comes first: the
// completions are made by the watching store for half of the keys and by
// another handle on the file for the others.
func TestWatchRacingCompletion(t *testing.T) {
	t.Parallel()
	path := testFile(t)
	writers := []*Store{newTestStoreOn(t, path), newTestStoreOn(t, path)}
	watcher := writers[0]
	const keys = 50
	owners := make([]store.Lease, keys)
	for i := range owners {
		owners[i] = mustClaim(t, watcher, fmt.Sprint("k", i), "t", time.Minute).Owner
	}
	watches := make([]<-chan struct{}, keys)
	errs := make([]error, 2*keys)
	var racing sync.WaitGroup
	for i := range 2 * keys {
		racing.Go(func() {
			key := fmt.Sprint("k", i/2)
			if i%2 == 0 {
				errs[i] = writers[i/2%2].Complete(context.Background(), key, owners[i/2], &store.Response{Status: 201}, time.Hour)
				return
			}
			changed, stop, err := watcher.Watch(context.Background(), key)
			if err == nil {
				t.Cleanup(stop)
			}
			watches[i/2], errs[i] = changed, err
		})
	}
	racing.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, changed := range watches {
		require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the completion of k%d", i)
	}
}

// BenchmarkWaitWake measures, through the middleware, how soon a request
// waiting for its duplicate in flight is answered after the duplicate
// completes (see waitbench.Run): both through one store, whose Complete
// wakes the waiter directly.
func BenchmarkWaitWake(b *testing.B) {
	waitbench.Run(b, newTestStore(b))
}

// BenchmarkWaitWakeAcrossHandles is BenchmarkWaitWake with the waiter's
// store watching through a *sql.DB of its own, and every other call made
// through another: its poller wakes it, as it does for a completion by
// another process.
func BenchmarkWaitWakeAcrossHandles(b *testing.B) {
	path := testFile(b)
	waitbench.Run(b, watchedOn(b, path, newTestStoreOn(b, path)))
}
