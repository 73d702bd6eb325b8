package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// testClaimAgainKeepsTheLease: the owner's Claim sent again reports the
// time left of its lease, not the one asked for, and extends nothing. A
// try whose two claims took longer than the lease (a store waiting for
// replicas on a loaded machine) proves nothing, and is made again.
func testClaimAgainKeepsTheLease(t *testing.T, s store.Store) {
	const tries = 3
	for try := range tries {
		key := fmt.Sprintf("again-%d", try)
		start := time.Now()
		owner := mustClaim(t, s, key, "fp", 2*shortLease)
		rec, claimed, err := s.Claim(t.Context(), key, "fp", owner.Token, longLease)
		require.NoError(t, err)
		if took := time.Since(start); took >= 2*shortLease {
			t.Logf("the two claims took %v, longer than the lease: trying again", took)
			continue
		}
		require.True(t, claimed, "the owner's own claim, sent again: %+v", rec)
		requireTTL(t, rec.TTL, 2*shortLease)
		time.Sleep(2 * pastShortLease)
		mustClaim(t, s, key, "fp-next", longLease)
		return
	}
	t.Fatalf("in %d tries, two claims never took less than the lease of %v", tries, 2*shortLease)
}

// testOwnTokenAfterCompleteLoses: once a key is completed, a Claim under
// its owner's token loses like any other.
func testOwnTokenAfterCompleteLoses(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "done", "fp", longLease)
	want := keyedResponse("done")
	complete(t, s, "done", owner, want)
	rec, claimed, err := s.Claim(t.Context(), "done", "fp", owner.Token, longLease)
	require.NoError(t, err)
	require.False(t, claimed, "a completed key is not claimed again by its former owner: %+v", rec)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Empty(t, rec.Owner.Token)
	requireSameResponse(t, want, rec.Response)
}

// testTTLCountsDown: a losing Claim reports the time left, not the lease
// or retention set.
func testTTLCountsDown(t *testing.T, s store.Store) {
	mustClaim(t, s, "running", "fp", longLease)
	owner := mustClaim(t, s, "done", "fp", longLease)
	complete(t, s, "done", owner, sampleResponse())
	sleepPastShortLease()
	require.LessOrEqual(t, mustLose(t, s, "running", "fp-2").TTL, longLease-shortLease, "lease left")
	require.LessOrEqual(t, mustLose(t, s, "done", "fp-2").TTL, retention-shortLease, "retention left")
}

// testLosingClaimChangesNothing: a losing Claim extends neither a lease
// (duplicates would keep a dead owner's key held for ever) nor a retention.
func testLosingClaimChangesNothing(t *testing.T, s store.Store) {
	mustClaim(t, s, "running", "fp", shortLease)
	mustLose(t, s, "running", "fp-2") // at once: a loaded machine may take a while between calls
	owner := mustClaim(t, s, "done", "fp", longLease)
	require.NoError(t, s.Complete(t.Context(), "done", owner, sampleResponse(), shortLease))
	mustLose(t, s, "done", "fp-2")
	sleepPastShortLease()
	mustClaim(t, s, "running", "fp-3", longLease)
	mustClaim(t, s, "done", "fp-3", longLease)
}

// testRenewSetsTheLeaseFromNow: Renew sets the lease's end from now, even
// sooner than before.
func testRenewSetsTheLeaseFromNow(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "k", "fp", longLease)
	require.NoError(t, s.Renew(t.Context(), "k", owner, shortLease))
	requireInFlight(t, s, "k", "fp", shortLease)
	sleepPastShortLease()
	mustClaim(t, s, "k", "fp-2", longLease)
}

// testRefusedRenewChangesNothing: a refused Renew does not move the lease.
func testRefusedRenewChangesNothing(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "k", "fp", shortLease)
	for _, wrong := range []store.Lease{
		{Token: newToken(), Fence: owner.Fence},
		{Token: owner.Token, Fence: owner.Fence + 1},
	} {
		requireNotOwner(t, s.Renew(t.Context(), "k", wrong, longLease), "Renew")
	}
	sleepPastShortLease()
	mustClaim(t, s, "k", "fp-2", longLease)
}

// testRetentionOutlivesTheLease: a completed record is kept for its
// retention, not for the rest of its lease.
func testRetentionOutlivesTheLease(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "k", "fp", 2*shortLease)
	want := sampleResponse()
	complete(t, s, "k", owner, want)
	time.Sleep(2 * pastShortLease)
	requireCompleted(t, s, "k", "fp", want)
}

// testExpiryKeepsLiveRecords: records expiring around them, and new keys
// claimed after (when the memory store sweeps), leave live records alone.
func testExpiryKeepsLiveRecords(t *testing.T, s store.Store) {
	for i := range 20 {
		mustClaim(t, s, fmt.Sprint("old-", i), "fp", shortLease)
	}
	mustClaim(t, s, "running", "fp-running", longLease)
	owner := mustClaim(t, s, "done", "fp-done", longLease)
	want := sampleResponse()
	complete(t, s, "done", owner, want)
	sleepPastShortLease()
	for i := range 40 {
		mustClaim(t, s, fmt.Sprint("new-", i), "fp", longLease)
	}
	requireInFlight(t, s, "running", "fp-running", longLease)
	requireCompleted(t, s, "done", "fp-done", want)
}
