package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// requireAllRefused requires Renew, Complete and Release by lease on key to
// be refused.
func requireAllRefused(t *testing.T, s store.Store, key string, lease store.Lease) {
	t.Helper()
	ctx := t.Context()
	requireNotOwner(t, s.Renew(ctx, key, lease, longLease), "Renew")
	requireNotOwner(t, s.Complete(ctx, key, lease, sampleResponse(), retention), "Complete")
	requireNotOwner(t, s.Complete(ctx, key, lease, nil, retention), "Complete(nil)")
	requireNotOwner(t, s.Release(ctx, key, lease), "Release")
}

// testLeaseOpsOnMissingKey: lease calls on a missing key are refused and
// create nothing.
func testLeaseOpsOnMissingKey(t *testing.T, s store.Store) {
	requireAllRefused(t, s, "missing", store.Lease{Token: newToken(), Fence: 1})
	mustClaim(t, s, "missing", "fp", longLease)
}

// testLeaseOpsOnCompletedKey: the completing lease's Complete sent again
// returns nil and changes nothing; every other lease call is refused.
func testLeaseOpsOnCompletedKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	for key, want := range map[string]*store.Response{"done": keyedResponse("done"), "unreplayable": nil} {
		owner := mustClaim(t, s, key, "fp", longLease)
		complete(t, s, key, owner, want)
		require.NoError(t, s.Complete(ctx, key, owner, sampleResponse(), shortLease), "Complete of %q sent again", key)
		require.NoError(t, s.Complete(ctx, key, owner, nil, shortLease), "Complete(nil) of %q sent again", key)
		requireNotOwner(t, s.Renew(ctx, key, owner, longLease), "Renew")
		requireNotOwner(t, s.Release(ctx, key, owner), "Release")
		for _, other := range []store.Lease{
			{Token: owner.Token, Fence: owner.Fence + 1},
			{Token: newToken(), Fence: owner.Fence},
			{Token: "", Fence: owner.Fence},
		} {
			requireAllRefused(t, s, key, other)
		}
	}
	sleepPastShortLease()
	requireCompleted(t, s, "done", "fp", keyedResponse("done"))
	rec := mustLose(t, s, "unreplayable", "fp-other")
	require.Equal(t, store.StateUnreplayable, rec.State)
	require.Nil(t, rec.Response)
	requireTTL(t, rec.TTL, retention)
}

// testWrongLeaseIsRefused: a lease is the token and the fencing number
// together; any other pair, or an empty token, is refused and changes
// nothing.
func testWrongLeaseIsRefused(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "key", "fp", longLease)
	for _, wrong := range []store.Lease{
		{Token: owner.Token, Fence: owner.Fence + 1},
		{Token: owner.Token, Fence: owner.Fence - 1},
		{Token: newToken(), Fence: owner.Fence},
		{Token: "", Fence: owner.Fence},
	} {
		requireAllRefused(t, s, "key", wrong)
	}
	requireOwnerIntact(t, s, "key", "fp", owner)
}

// testRenewExtendsLease: a renewed record stays the owner's past its first
// lease (twice shortLease, so that the renewal lands before its end on a
// loaded machine).
func testRenewExtendsLease(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "slow", "fp", 2*shortLease)
	require.NoError(t, s.Renew(t.Context(), "slow", owner, longLease), "Renew by the owner")
	time.Sleep(2 * pastShortLease)
	requireOwnerIntact(t, s, "slow", "fp", owner)
}

// testReleaseLetsNextClaimWin: after a Release the next Claim wins with a
// higher fencing number, and the released lease is refused.
func testReleaseLetsNextClaimWin(t *testing.T, s store.Store) {
	first := mustClaim(t, s, "retry", "fp-1", longLease)
	require.NoError(t, s.Release(t.Context(), "retry", first), "Release by the owner")
	second := mustClaim(t, s, "retry", "fp-2", longLease)
	require.NotEqual(t, first.Token, second.Token)
	require.Greater(t, second.Fence, first.Fence, "a claim after a release gets a higher fencing number")
	requireAllRefused(t, s, "retry", first)
	requireOwnerIntact(t, s, "retry", "fp-2", second)
}

// testReleasedKeyHasNoOwner: after a Release, neither the released lease
// nor an empty token with its fencing number holds the key (a store that
// clears the token must not let an empty one match).
func testReleasedKeyHasNoOwner(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "released", "fp", longLease)
	require.NoError(t, s.Release(t.Context(), "released", owner), "Release by the owner")
	requireAllRefused(t, s, "released", owner)
	requireAllRefused(t, s, "released", store.Lease{Token: "", Fence: owner.Fence})
	next := mustClaim(t, s, "released", "fp", longLease)
	require.Greater(t, next.Fence, owner.Fence)
}

// testEmptyTokenIsRefused: a Claim under an empty token fails with
// store.ErrEmptyToken and leaves the key free.
func testEmptyTokenIsRefused(t *testing.T, s store.Store) {
	_, claimed, err := s.Claim(t.Context(), "untokened", "fp", "", longLease)
	require.ErrorIs(t, err, store.ErrEmptyToken)
	require.False(t, claimed)
	mustClaim(t, s, "untokened", "fp", longLease)
}

// testClaimAgainUnderOwnToken: a Claim sent again under the live lease's
// token reports the key claimed under that lease and changes nothing.
func testClaimAgainUnderOwnToken(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "again", "fp", longLease)
	rec, claimed, err := s.Claim(t.Context(), "again", "fp", owner.Token, longLease)
	require.NoError(t, err)
	require.True(t, claimed, "the owner's own claim, sent again: %+v", rec)
	require.Equal(t, owner, rec.Owner)
	require.Equal(t, store.StateInFlight, rec.State)
	require.Positive(t, rec.TTL)
	requireOwnerIntact(t, s, "again", "fp", owner)
}

// testFencesNeverGoBack: after a takeover and then a release, the next
// claim's fencing number is above both earlier owners', or a downstream
// system that saw the second's would refuse the third.
func testFencesNeverGoBack(t *testing.T, s store.Store) {
	crashed, second := takeover(t, s, "pay")
	require.NoError(t, s.Release(t.Context(), "pay", second), "Release by the second owner")
	third := mustClaim(t, s, "pay", "fp-third", longLease)
	require.Greater(t, third.Fence, second.Fence, "fencing numbers went %d, %d, %d", crashed.Fence, second.Fence, third.Fence)
	requireAllRefused(t, s, "pay", crashed)
	requireAllRefused(t, s, "pay", second)
}

// takeover lets a short lease of key expire and requires the next claim to
// win with a higher fencing number. It returns both leases.
func takeover(t *testing.T, s store.Store, key string) (stale, current store.Lease) {
	t.Helper()
	stale = mustClaim(t, s, key, "fp-stale", shortLease)
	sleepPastShortLease()
	current = mustClaim(t, s, key, "fp-current", longLease)
	require.NotEqual(t, stale.Token, current.Token)
	require.Greater(t, current.Fence, stale.Fence, "a takeover gets a higher fencing number")
	return stale, current
}

// requireOwnerIntact requires key to be in flight with fingerprint, and
// owner to still renew and complete it.
func requireOwnerIntact(t *testing.T, s store.Store, key, fingerprint string, owner store.Lease) {
	t.Helper()
	requireInFlight(t, s, key, fingerprint, longLease)
	require.NoError(t, s.Renew(t.Context(), key, owner, longLease), "Renew by the owner")
	want := keyedResponse(key)
	complete(t, s, key, owner, want)
	requireCompleted(t, s, key, fingerprint, want)
}

// testTakeoverAfterLeaseExpiry: once a lease has expired on the store's
// clock, the next Claim takes the key over.
func testTakeoverAfterLeaseExpiry(t *testing.T, s store.Store) {
	_, current := takeover(t, s, "crashed")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleRenewIsRefused: after a takeover, the stale lease's Renew is
// refused and changes nothing.
func testStaleRenewIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Renew(t.Context(), "crashed", stale, longLease), "Renew")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleCompleteIsRefused: after a takeover, the stale lease's
// Complete, with or without a response, is refused and changes nothing.
func testStaleCompleteIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Complete(t.Context(), "crashed", stale, sampleResponse(), retention), "Complete")
	requireNotOwner(t, s.Complete(t.Context(), "crashed", stale, nil, retention), "Complete(nil)")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleReleaseIsRefused: after a takeover, the stale lease's Release
// is refused and changes nothing.
func testStaleReleaseIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Release(t.Context(), "crashed", stale), "Release")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testCompletedRecordExpires: after its retention a completed record is
// gone: Claim wins afresh, and the old lease is refused.
func testCompletedRecordExpires(t *testing.T, s store.Store) {
	first := mustClaim(t, s, "old", "fp-old", longLease)
	require.NoError(t, s.Complete(t.Context(), "old", first, sampleResponse(), shortLease))
	sleepPastShortLease()
	second := mustClaim(t, s, "old", "fp-new", longLease)
	require.NotEqual(t, first.Token, second.Token)
	requireAllRefused(t, s, "old", first)
	requireInFlight(t, s, "old", "fp-new", longLease)
}
