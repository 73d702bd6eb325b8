package sqlitestore

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// polling reports whether s's poller runs.
func polling(s *Store) bool {
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	return s.watches.poller != nil
}

// TestPollerStopsWithTheLastWatch: the poller runs while any watch does,
// and stops, its goroutine gone, with the last one; the next watch starts
// it again, and it wakes that watch at another handle's completion. Not
// parallel: it counts the process's goroutines.
func TestPollerStopsWithTheLastWatch(t *testing.T) {
	path := testFile(t)
	s, other := newTestStoreOn(t, path), newTestStoreOn(t, path)
	goroutines := runtime.NumGoroutine()
	mustClaim(t, s, "a", "t", time.Minute)
	mustClaim(t, s, "b", "t", time.Minute)
	var stops []func()
	for _, key := range []string{"a", "a", "b"} {
		_, stop, err := s.Watch(t.Context(), key)
		require.NoError(t, err)
		stops = append(stops, stop)
	}
	for _, stop := range stops[:2] {
		stop()
	}
	time.Sleep(storetest.QuietFor)
	require.True(t, polling(s), "one watch is left")
	require.Greater(t, runtime.NumGoroutine(), goroutines, "one watch is left")

	stops[2]()
	requireStopped(t, s, goroutines)

	owner := mustClaim(t, other, "c", "t", time.Minute).Owner
	changed, stop, err := s.Watch(t.Context(), "c")
	require.NoError(t, err)
	require.True(t, polling(s))
	require.NoError(t, other.Complete(t.Context(), "c", owner, &store.Response{Status: 201}, time.Hour))
	require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "woken by the other handle's Complete")
	stop()
	requireStopped(t, s, goroutines)
}

// requireStopped requires s's poller to stop, and the process to be back
// to goroutines goroutines, within storetest.WakeWithin. It counts them in the
// test's goroutine: require.Eventually would count its own.
func requireStopped(t *testing.T, s *Store, goroutines int) {
	t.Helper()
	for deadline := time.Now().Add(storetest.WakeWithin); polling(s) || runtime.NumGoroutine() > goroutines; {
		if time.Now().After(deadline) {
			t.Fatalf("the poller still runs, or %d goroutines are left of %d, %v after the last watch stopped",
				runtime.NumGoroutine(), goroutines, storetest.WakeWithin)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPollerStorm: goroutines racing on a few keys, each watching, some
// stopping at once, and the keys' owners completing or releasing them
// meanwhile through the watching store or another handle: every watch
// still waiting for a key when it leaves flight is woken, pollers stopping
// with a last watch while others start with a new one, and once all have
// stopped, no poller is left. Not parallel: it counts the process's
// goroutines.
func TestPollerStorm(t *testing.T) {
	path := testFile(t)
	s, other := newTestStoreOn(t, path), newTestStoreOn(t, path)
	goroutines := runtime.NumGoroutine()
	const rounds, keys, watchers = 20, 4, 8
	for round := range rounds {
		var racing sync.WaitGroup
		for k := range keys {
			key := fmt.Sprint(round, "-", k)
			owner := mustClaim(t, s, key, "t", time.Minute).Owner
			for w := range watchers {
				racing.Go(func() {
					changed, stop, err := s.Watch(t.Context(), key)
					if !assert.NoError(t, err) {
						return
					}
					defer stop()
					if w%2 == 0 {
						assert.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "watch %d of %s woken", w, key)
					}
				})
			}
			racing.Go(func() {
				time.Sleep(rand.N(5 * time.Millisecond))
				ender := []*Store{s, other}[k%2]
				if k/2%2 == 0 {
					assert.NoError(t, ender.Release(t.Context(), key, owner))
					return
				}
				assert.NoError(t, ender.Complete(t.Context(), key, owner, nil, time.Minute))
			})
		}
		racing.Wait()
	}
	requireStopped(t, s, goroutines)
}
