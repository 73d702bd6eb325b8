package store_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// startWatch starts watching key on m and requires no error.
func startWatch(t *testing.T, m *store.Memory, key string) (changed <-chan struct{}, stop func()) {
	t.Helper()
	changed, stop, err := m.Watch(t.Context(), key)
	require.NoError(t, err)
	return changed, stop
}

// requireClosed requires changed to be closed now.
func requireClosed(t *testing.T, changed <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-changed:
	default:
		t.Fatalf("not closed: %s", why)
	}
}

// TestMemoryWatchOfAKeyNotInFlight: the watch of a key that is missing,
// done, or in flight under a lease that has ended is closed at once, and
// the store keeps nothing for it.
func TestMemoryWatchOfAKeyNotInFlight(t *testing.T) {
	t.Parallel()
	m := store.NewMemory()
	ctx := t.Context()
	completed := mustClaim(t, m, "completed", lease)
	require.NoError(t, m.Complete(ctx, "completed", completed, &store.Response{Status: http.StatusOK}, retention))
	unreplayable := mustClaim(t, m, "unreplayable", lease)
	require.NoError(t, m.Complete(ctx, "unreplayable", unreplayable, nil, retention))
	mustClaim(t, m, "lapsed", short)
	time.Sleep(pastShort)

	for _, key := range []string{"missing", "completed", "unreplayable", "lapsed"} {
		t.Run(key, func(t *testing.T) {
			requireClosed(t, storetest.MustWatch(t, m, key), "the key is not in flight")
			require.Zero(t, store.MemoryWatchedKeys(m))
		})
	}
}

// TestMemoryWatchWokenBySweep: a key whose lease lapsed, swept to make
// room for another, wakes its watcher.
func TestMemoryWatchWokenBySweep(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxRecords(1))
	mustClaim(t, m, "dead", short)
	changed := storetest.MustWatch(t, m, "dead")
	time.Sleep(pastShort)
	mustClaim(t, m, "filler", lease) // sweeps "dead" to make room
	requireClosed(t, changed, "the sweep removed the key")
	require.Zero(t, store.MemoryWatchedKeys(m))
}

// TestMemoryWatchStop: every order of stops and wake-ups leaves the store
// holding nothing for a key nobody watches, and a watch stopped late, after
// its wake-up, does not end a newer watch of the same key.
func TestMemoryWatchStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t.Run("before the wake-up", func(t *testing.T) {
		m := store.NewMemory()
		owner := mustClaim(t, m, "k", lease)
		var stops []func()
		for range 3 {
			_, stop := startWatch(t, m, "k")
			stops = append(stops, stop)
		}
		require.Equal(t, 1, store.MemoryWatchedKeys(m), "one key watched three times")
		for _, stop := range stops {
			stop()
		}
		require.Zero(t, store.MemoryWatchedKeys(m))
		require.NoError(t, m.Release(ctx, "k", owner))
	})
	t.Run("after the wake-up", func(t *testing.T) {
		m := store.NewMemory()
		owner := mustClaim(t, m, "k", lease)
		changed, stop := startWatch(t, m, "k")
		require.NoError(t, m.Release(ctx, "k", owner))
		requireClosed(t, changed, "released")
		require.Zero(t, store.MemoryWatchedKeys(m), "a wake-up forgets the key's watches")
		stop()
		require.Zero(t, store.MemoryWatchedKeys(m))
	})
	t.Run("late, during a newer watch", func(t *testing.T) {
		m := store.NewMemory()
		first := mustClaim(t, m, "k", lease)
		_, late := startWatch(t, m, "k")
		require.NoError(t, m.Release(ctx, "k", first))
		second := mustClaim(t, m, "k", lease)
		changed := storetest.MustWatch(t, m, "k")
		late()
		require.Equal(t, 1, store.MemoryWatchedKeys(m), "the newer watch is kept")
		require.NoError(t, m.Complete(ctx, "k", second, nil, retention))
		requireClosed(t, changed, "the second claim completed")
	})
}
