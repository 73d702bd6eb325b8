package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

const (
	// WakeWithin is how long the suite lets a watcher take to be woken
	// after the change that wakes it: far more than a store takes, so only
	// a wake-up that never comes reaches it. A backend's own watch tests
	// may wait as long, with ClosedWithin.
	WakeWithin = 5 * time.Second
	// QuietFor is how long the suite watches for a wake-up that must not
	// come; a backend's own watch tests may watch as long.
	QuietFor = 300 * time.Millisecond
	// watchersPerKey is how many callers watch one key at once.
	watchersPerKey = 8
)

// ClosedWithin reports whether changed, a watch's channel, is closed
// within d.
func ClosedWithin(changed <-chan struct{}, d time.Duration) bool {
	select {
	case <-changed:
		return true
	case <-time.After(d):
		return false
	}
}

// RunWatch runs the conformance suite of store.Watcher's Watch against the
// stores newStore returns, under the same rules as Run's newStore. To
// pass, a watch of an in-flight key is woken by its Complete (with a
// response or nil) and by its Release, every watcher of the key at once;
// it is not woken while the key stays in flight (claims that lose, a
// renewal, another key's completion); and stop may be called before or
// after the wake-up.
func RunWatch(t *testing.T, newStore func(t *testing.T) store.Watcher) {
	runCases(t, newStore, []suiteCase[store.Watcher]{
		{"EndingsWake", testWatchEndingsWake},
		{"EveryWatcherWakes", testWatchEveryWatcherWakes},
		{"InFlightStaysQuiet", testWatchInFlightStaysQuiet},
		{"OtherKeysStayQuiet", testWatchOtherKeysStayQuiet},
		{"StopBeforeTheChange", testWatchStopBeforeTheChange},
		{"WatchAgainAfterAWakeUp", testWatchAgainAfterAWakeUp},
	})
}

// MustWatch starts watching key on s, failing the test if Watch errs, and
// stops the watch when the test ends. It returns the watch's channel.
func MustWatch(t *testing.T, s store.Watcher, key string) <-chan struct{} {
	t.Helper()
	changed, stop, err := s.Watch(t.Context(), key)
	require.NoError(t, err, "watch %q", key)
	t.Cleanup(stop)
	return changed
}

// requireWoken requires changed to be closed within WakeWithin.
func requireWoken(t *testing.T, changed <-chan struct{}, why string) {
	t.Helper()
	if !ClosedWithin(changed, WakeWithin) {
		t.Fatalf("no wake-up within %v of %s", WakeWithin, why)
	}
}

// requireQuiet requires changed to stay open for QuietFor.
func requireQuiet(t *testing.T, changed <-chan struct{}, why string) {
	t.Helper()
	if ClosedWithin(changed, QuietFor) {
		t.Fatalf("woken while %s", why)
	}
}

// endings are the calls that take an in-flight record out of flight.
var endings = []struct {
	name string
	end  func(t *testing.T, s store.Store, key string, owner store.Lease)
}{
	{"Complete", func(t *testing.T, s store.Store, key string, owner store.Lease) {
		complete(t, s, key, owner, sampleResponse())
	}},
	{"Complete with a nil response", func(t *testing.T, s store.Store, key string, owner store.Lease) {
		complete(t, s, key, owner, nil)
	}},
	{"Release", func(t *testing.T, s store.Store, key string, owner store.Lease) {
		require.NoError(t, s.Release(t.Context(), key, owner))
	}},
}

// testWatchEndingsWake: each of the endings of a key in flight wakes its
// watcher.
func testWatchEndingsWake(t *testing.T, s store.Watcher) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			owner := mustClaim(t, s, e.name, "fp", longLease)
			changed := MustWatch(t, s, e.name)
			e.end(t, s, e.name, owner)
			requireWoken(t, changed, e.name)
		})
	}
}

// testWatchEveryWatcherWakes: watchersPerKey callers watching one key are
// all woken by one completion.
func testWatchEveryWatcherWakes(t *testing.T, s store.Watcher) {
	owner := mustClaim(t, s, "crowd", "fp", longLease)
	watchers := make([]<-chan struct{}, watchersPerKey)
	var started sync.WaitGroup
	for i := range watchers {
		started.Go(func() {
			changed, stop, err := s.Watch(t.Context(), "crowd")
			if err == nil {
				t.Cleanup(stop)
			}
			watchers[i] = changed
		})
	}
	started.Wait()
	for i, changed := range watchers {
		require.NotNil(t, changed, "watcher %d started", i)
	}
	complete(t, s, "crowd", owner, sampleResponse())
	for i, changed := range watchers {
		requireWoken(t, changed, fmt.Sprintf("Complete, for watcher %d", i))
	}
}

// testWatchInFlightStaysQuiet: while the key stays in flight, neither a
// losing claim nor a renewal wakes its watcher.
func testWatchInFlightStaysQuiet(t *testing.T, s store.Watcher) {
	owner := mustClaim(t, s, "busy", "fp", longLease)
	changed := MustWatch(t, s, "busy")
	mustLose(t, s, "busy", "fp")
	require.NoError(t, s.Renew(t.Context(), "busy", owner, longLease))
	requireQuiet(t, changed, "the key is in flight")
}

// testWatchOtherKeysStayQuiet: completing and releasing other keys does
// not wake the watcher of a key in flight.
func testWatchOtherKeysStayQuiet(t *testing.T, s store.Watcher) {
	mustClaim(t, s, "watched", "fp", longLease)
	changed := MustWatch(t, s, "watched")
	complete(t, s, "other-1", mustClaim(t, s, "other-1", "fp", longLease), sampleResponse())
	require.NoError(t, s.Release(t.Context(), "other-2", mustClaim(t, s, "other-2", "fp", longLease)))
	requireQuiet(t, changed, "only other keys changed")
}

// testWatchStopBeforeTheChange: a watch stopped before the key changes
// leaves the store working: the completion succeeds, and new watches of
// other keys are woken as usual.
func testWatchStopBeforeTheChange(t *testing.T, s store.Watcher) {
	owner := mustClaim(t, s, "abandoned", "fp", longLease)
	_, stop, err := s.Watch(t.Context(), "abandoned")
	require.NoError(t, err)
	stop()
	complete(t, s, "abandoned", owner, sampleResponse())
	testWatchEndingsWake(t, s)
}

// testWatchAgainAfterAWakeUp: after a release wakes a watcher and another
// caller claims the key, a new watch is quiet while that claim is in
// flight and woken by its completion.
func testWatchAgainAfterAWakeUp(t *testing.T, s store.Watcher) {
	first := mustClaim(t, s, "again", "fp", longLease)
	changed := MustWatch(t, s, "again")
	require.NoError(t, s.Release(t.Context(), "again", first))
	requireWoken(t, changed, "Release")

	second := mustClaim(t, s, "again", "fp", longLease)
	changed = MustWatch(t, s, "again")
	requireQuiet(t, changed, "the second claim is in flight")
	complete(t, s, "again", second, sampleResponse())
	requireWoken(t, changed, "the second claim's Complete")
}
