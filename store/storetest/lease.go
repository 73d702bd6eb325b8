package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// requireAllRefused requires Renew, Complete and Release by lease on key to
// each return store.ErrNotOwner.
func requireAllRefused(t *testing.T, s store.Store, key string, lease store.Lease) {
	t.Helper()
	ctx := t.Context()
	requireNotOwner(t, s.Renew(ctx, key, lease, longLease), "Renew")
	requireNotOwner(t, s.Complete(ctx, key, lease, sampleResponse(), retention), "Complete")
	requireNotOwner(t, s.Complete(ctx, key, lease, nil, retention), "Complete(nil)")
	requireNotOwner(t, s.Release(ctx, key, lease), "Release")
}

// testLeaseOpsOnMissingKey: Renew, Complete and Release on a key that has
// no record return store.ErrNotOwner and create nothing: the next Claim
// wins.
func testLeaseOpsOnMissingKey(t *testing.T, s store.Store) {
	requireAllRefused(t, s, "missing", store.Lease{Token: newToken(), Fence: 1})
	mustClaim(t, s, "missing", "fp", longLease)
}

// testLeaseOpsOnCompletedKey: once its owner completed a key, with a
// response or without, a Complete by that same lease (sent again, its
// first reply lost) returns nil and changes nothing: neither the stored
// response nor the retention. Renew and Release by it, and all three by
// any other lease, return store.ErrNotOwner.
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

// testWrongLeaseIsRefused: the lease is the token and the fencing number
// together. The owner's token with another fencing number, another token
// with the owner's fencing number, and an empty token are all refused with
// store.ErrNotOwner and change nothing: the owner can still renew and
// complete.
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

// testRenewExtendsLease: Renew sets the lease's end to the new lease from
// now: a record renewed for a long lease is still in flight, and still the
// owner's, well past the end of its first, short lease. (The first lease is
// twice shortLease so that the renewal lands before its end even on a
// loaded machine.)
func testRenewExtendsLease(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "slow", "fp", 2*shortLease)
	require.NoError(t, s.Renew(t.Context(), "slow", owner, longLease), "Renew by the owner")
	time.Sleep(2 * pastShortLease)
	requireOwnerIntact(t, s, "slow", "fp", owner)
}

// testReleaseLetsNextClaimWin: Release by the owner frees the key, so the
// next Claim wins under its own token, with a higher fencing number. The
// released lease is refused afterwards and cannot touch the new owner's
// record.
func testReleaseLetsNextClaimWin(t *testing.T, s store.Store) {
	first := mustClaim(t, s, "retry", "fp-1", longLease)
	require.NoError(t, s.Release(t.Context(), "retry", first), "Release by the owner")
	second := mustClaim(t, s, "retry", "fp-2", longLease)
	require.NotEqual(t, first.Token, second.Token)
	require.Greater(t, second.Fence, first.Fence, "a claim after a release gets a higher fencing number")
	requireAllRefused(t, s, "retry", first)
	requireOwnerIntact(t, s, "retry", "fp-2", second)
}

// testReleasedKeyHasNoOwner: between a Release and the next Claim nobody
// holds the key. The released lease is refused, and so is an empty token
// with its fencing number (a store that keeps the record and clears its
// token must not let an empty token match); the next Claim wins.
func testReleasedKeyHasNoOwner(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "released", "fp", longLease)
	require.NoError(t, s.Release(t.Context(), "released", owner), "Release by the owner")
	requireAllRefused(t, s, "released", owner)
	requireAllRefused(t, s, "released", store.Lease{Token: "", Fence: owner.Fence})
	next := mustClaim(t, s, "released", "fp", longLease)
	require.Greater(t, next.Fence, owner.Fence)
}

// testEmptyTokenIsRefused: a Claim under an empty token fails with
// store.ErrEmptyToken and leaves the key free: an empty token could not
// tell its owner from a released record's, so it holds nothing.
func testEmptyTokenIsRefused(t *testing.T, s store.Store) {
	_, claimed, err := s.Claim(t.Context(), "untokened", "fp", "", longLease)
	require.ErrorIs(t, err, store.ErrEmptyToken)
	require.False(t, claimed)
	mustClaim(t, s, "untokened", "fp", longLease)
}

// testClaimAgainUnderOwnToken: a Claim sent again under the token that
// holds the key's live lease, as a client library sends a call again when
// its reply was lost, reports the key claimed, with the same fencing
// number, and changes nothing; the owner still renews and completes it, and
// a Claim under another token still finds it in flight.
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

// testFencesNeverGoBack: a crashed owner's lease lapses and is taken over;
// the new owner's handler fails and releases the key; the next claim must
// get a fencing number higher than both, or a downstream system that has
// seen the second owner's number would refuse the third owner, and could
// not tell the third from the crashed first.
func testFencesNeverGoBack(t *testing.T, s store.Store) {
	crashed, second := takeover(t, s, "pay")
	require.NoError(t, s.Release(t.Context(), "pay", second), "Release by the second owner")
	third := mustClaim(t, s, "pay", "fp-third", longLease)
	require.Greater(t, third.Fence, second.Fence, "fencing numbers went %d, %d, %d", crashed.Fence, second.Fence, third.Fence)
	requireAllRefused(t, s, "pay", crashed)
	requireAllRefused(t, s, "pay", second)
}

// takeover claims key under a short lease, lets the lease expire, and takes
// the key over. The takeover must win under the new token with a fencing
// number strictly higher than the first owner's. It returns the stale and
// the current lease.
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
// owner to still hold it: owner renews and completes it, and the next Claim
// replays owner's response.
func requireOwnerIntact(t *testing.T, s store.Store, key, fingerprint string, owner store.Lease) {
	t.Helper()
	requireInFlight(t, s, key, fingerprint, longLease)
	require.NoError(t, s.Renew(t.Context(), key, owner, longLease), "Renew by the owner")
	want := keyedResponse(key)
	complete(t, s, key, owner, want)
	requireCompleted(t, s, key, fingerprint, want)
}

// testTakeoverAfterLeaseExpiry: once a lease has expired on the store's
// clock, the next Claim takes the key over (see takeover) and the new owner
// holds it.
func testTakeoverAfterLeaseExpiry(t *testing.T, s store.Store) {
	_, current := takeover(t, s, "crashed")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleRenewIsRefused: after a takeover, Renew by the stale lease
// returns store.ErrNotOwner and leaves the new owner's record untouched.
func testStaleRenewIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Renew(t.Context(), "crashed", stale, longLease), "Renew")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleCompleteIsRefused: after a takeover, Complete by the stale
// lease, with a response or without, returns store.ErrNotOwner and neither
// completes nor changes the new owner's record.
func testStaleCompleteIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Complete(t.Context(), "crashed", stale, sampleResponse(), retention), "Complete")
	requireNotOwner(t, s.Complete(t.Context(), "crashed", stale, nil, retention), "Complete(nil)")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testStaleReleaseIsRefused: after a takeover, Release by the stale lease
// returns store.ErrNotOwner and does not delete the new owner's record.
func testStaleReleaseIsRefused(t *testing.T, s store.Store) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.Release(t.Context(), "crashed", stale), "Release")
	requireOwnerIntact(t, s, "crashed", "fp-current", current)
}

// testCompletedRecordExpires: a completed record is kept for its retention
// and no longer: after it, Claim wins afresh with the new fingerprint and
// no trace of the old response, and the old lease is refused.
func testCompletedRecordExpires(t *testing.T, s store.Store) {
	first := mustClaim(t, s, "old", "fp-old", longLease)
	require.NoError(t, s.Complete(t.Context(), "old", first, sampleResponse(), shortLease))
	sleepPastShortLease()
	second := mustClaim(t, s, "old", "fp-new", longLease)
	require.NotEqual(t, first.Token, second.Token)
	requireAllRefused(t, s, "old", first)
	requireInFlight(t, s, "old", "fp-new", longLease)
}
