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
	// WakeWithin is how long the suite waits for a wake-up: far more than
	// a store takes, so only one that never comes reaches it.
	WakeWithin = 5 * time.Second
	// QuietFor is how long the suite watches for a wake-up that must not
	// come.
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

// RunWatch runs the conformance suite of store.Watcher against the stores
// newStore returns, with Run's rules for newStore. To pass, every watch of
// an in-flight key is woken by its Complete or Release, and by nothing
// that leaves it in flight; stop may come before or after the wake-up.
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

// MustWatch watches key on s until the test ends, failing the test if
// Watch errs, and returns the watch's channel.
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

// testWatchEndingsWake: each ending of a key in flight wakes its watcher.
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

// testWatchEveryWatcherWakes: one completion wakes every watcher of a key.
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
// leaves the store working.
func testWatchStopBeforeTheChange(t *testing.T, s store.Watcher) {
	owner := mustClaim(t, s, "abandoned", "fp", longLease)
	_, stop, err := s.Watch(t.Context(), "abandoned")
	require.NoError(t, err)
	stop()
	complete(t, s, "abandoned", owner, sampleResponse())
	testWatchEndingsWake(t, s)
}

// testWatchAgainAfterAWakeUp: once a release woke a watcher and the key is
// claimed again, a new watch waits for the new claim's completion.
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
