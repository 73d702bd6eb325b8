package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TombstoneTime is how long the stores RunTombstones tests must keep a
// tombstone after a record's retention ends.
const TombstoneTime = time.Second

// RunTombstones runs the conformance suite of tombstones against the
// stores newStore returns, with Run's rules for newStore; each must keep
// tombstones for TombstoneTime. To pass, a done record whose retention
// ended is answered as a StateExpired tombstone until then, and only then
// may its key be claimed again.
func RunTombstones(t *testing.T, newStore func(t *testing.T) store.Store) {
	runCases(t, newStore, []suiteCase[store.Store]{
		{"CompletedRecordLeavesATombstone", testCompletedRecordLeavesATombstone},
		{"UnreplayableRecordLeavesATombstone", testUnreplayableRecordLeavesATombstone},
		{"TombstoneEnds", testTombstoneEnds},
		{"LapsedLeaseLeavesNoTombstone", testLapsedLeaseLeavesNoTombstone},
	})
}

// expire completes key with resp for shortLease, lets the retention end,
// and returns the tombstone a claim then finds, with the instants before
// and after Complete.
func expire(t *testing.T, s store.Store, key string, resp *store.Response) (tomb store.Record, before, after time.Time) {
	t.Helper()
	owner := mustClaim(t, s, key, "fp-"+key, longLease)
	before = time.Now()
	require.NoError(t, s.Complete(t.Context(), key, owner, resp, shortLease))
	after = time.Now()
	sleepPastShortLease()
	tomb = mustLose(t, s, key, "fp-"+key)
	require.Equal(t, store.StateExpired, tomb.State, "a claim after the retention of %q", key)
	require.Equal(t, "fp-"+key, tomb.Fingerprint, "a tombstone keeps the fingerprint")
	require.Nil(t, tomb.Response, "a tombstone keeps no response")
	requireTTL(t, tomb.TTL, TombstoneTime)
	return tomb, before, after
}

// requireCompletedBetween requires completed to lie between before and
// after, give or take a second for the store's clock.
func requireCompletedBetween(t *testing.T, completed, before, after time.Time) {
	t.Helper()
	require.WithinRange(t, completed, before.Add(-time.Second), after.Add(time.Second), "a tombstone's completion time")
}

// testCompletedRecordLeavesATombstone: a completed record whose retention
// ended leaves a tombstone that says when it completed.
func testCompletedRecordLeavesATombstone(t *testing.T, s store.Store) {
	tomb, before, after := expire(t, s, "paid", sampleResponse())
	requireCompletedBetween(t, tomb.Completed, before, after)
}

// testUnreplayableRecordLeavesATombstone: so does a record done without a
// stored response.
func testUnreplayableRecordLeavesATombstone(t *testing.T, s store.Store) {
	tomb, before, after := expire(t, s, "unreplayable", nil)
	requireCompletedBetween(t, tomb.Completed, before, after)
}

// testTombstoneEnds: after TombstoneTime the key can be claimed again,
// with a higher fence.
func testTombstoneEnds(t *testing.T, s store.Store) {
	tomb, _, _ := expire(t, s, "old", sampleResponse())
	time.Sleep(TombstoneTime)
	rec, claimed, _ := claim(t, s, "old", "fp-new", longLease)
	require.True(t, claimed, "a claim after the tombstone's time wins; got %+v", rec)
	require.GreaterOrEqual(t, rec.Owner.Fence, tomb.Owner.Fence)
}

// testLapsedLeaseLeavesNoTombstone: a key that never completed leaves no
// tombstone: its lapsed lease is taken over.
func testLapsedLeaseLeavesNoTombstone(t *testing.T, s store.Store) {
	takeover(t, s, "crashed")
}
