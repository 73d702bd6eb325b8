package storetest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// RunAdmin runs the conformance suite of store.Admin against the stores
// newStore returns, with Run's rules for newStore. To pass, Inspect reports
// a live record as a losing Claim sees it and changes nothing, Delete
// refuses a live lease unless forced and lets the next claim win with a
// higher fence, and Find lists live records by hash prefix.
func RunAdmin(t *testing.T, newStore func(t *testing.T) store.Admin) {
	runCases(t, newStore, []suiteCase[store.Admin]{
		{"InspectInFlight", testInspectInFlight},
		{"InspectDone", testInspectDone},
		{"InspectFindsNoDeadRecord", testInspectFindsNoDeadRecord},
		{"DeleteDone", testDeleteDone},
		{"DeleteRefusesLiveLease", testDeleteRefusesLiveLease},
		{"ForcedDeleteFencesTheOwnerOut", testForcedDeleteFencesTheOwnerOut},
		{"DeleteMissing", testDeleteMissing},
		{"FindByPrefix", testFindByPrefix},
		{"BadHashes", testBadHashes},
	})
}

// inspect inspects key's record, requiring no error.
func inspect(t *testing.T, s store.Admin, key string) (store.Record, bool) {
	t.Helper()
	rec, found, err := s.Inspect(t.Context(), store.HashKey(key))
	require.NoError(t, err, "Inspect(%q)", key)
	return rec, found
}

// testInspectInFlight: an in-flight record shows its fingerprint, fence
// and lease left, never the token, and stays its owner's.
func testInspectInFlight(t *testing.T, s store.Admin) {
	owner := mustClaim(t, s, "k", "fp", longLease)
	rec, found := inspect(t, s, "k")
	require.True(t, found, "a claimed key is found")
	require.Equal(t, store.StateInFlight, rec.State)
	require.Equal(t, "fp", rec.Fingerprint)
	require.Equal(t, store.Lease{Fence: owner.Fence}, rec.Owner, "the fence, without the token")
	require.Nil(t, rec.Response)
	requireTTL(t, rec.TTL, longLease)
	require.NoError(t, s.Renew(t.Context(), "k", owner, longLease), "Inspect leaves the lease its owner's")
}

// testInspectDone: a completed record shows its response and the retention
// left; one done without a response is unreplayable.
func testInspectDone(t *testing.T, s store.Admin) {
	owner := mustClaim(t, s, "k", "fp", longLease)
	complete(t, s, "k", owner, sampleResponse())
	rec, found := inspect(t, s, "k")
	require.True(t, found)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, store.Lease{Fence: owner.Fence}, rec.Owner)
	requireTTL(t, rec.TTL, retention)
	requireSameResponse(t, sampleResponse(), rec.Response)

	owner = mustClaim(t, s, "unreplayable", "fp", longLease)
	complete(t, s, "unreplayable", owner, nil)
	rec, found = inspect(t, s, "unreplayable")
	require.True(t, found)
	require.Equal(t, store.StateUnreplayable, rec.State)
	require.Nil(t, rec.Response)
}

// testInspectFindsNoDeadRecord: a key never claimed, released, or whose
// lease or retention ended is not found.
func testInspectFindsNoDeadRecord(t *testing.T, s store.Admin) {
	owner := mustClaim(t, s, "released", "fp", longLease)
	require.NoError(t, s.Release(t.Context(), "released", owner))
	mustClaim(t, s, "lapsed", "fp", shortLease)
	owner = mustClaim(t, s, "expired", "fp", longLease)
	require.NoError(t, s.Complete(t.Context(), "expired", owner, sampleResponse(), shortLease))
	sleepPastShortLease()
	for _, key := range []string{"never", "released", "lapsed", "expired"} {
		_, found := inspect(t, s, key)
		require.False(t, found, "record of %q", key)
	}
}

// testDeleteDone: a done record is deleted without force, and the next
// claim of its key wins.
func testDeleteDone(t *testing.T, s store.Admin) {
	for _, resp := range []*store.Response{sampleResponse(), nil} {
		owner := mustClaim(t, s, "k", "fp", longLease)
		complete(t, s, "k", owner, resp)
		deleted, err := s.Delete(t.Context(), store.HashKey("k"), false)
		require.NoError(t, err)
		require.True(t, deleted)
		_, found := inspect(t, s, "k")
		require.False(t, found, "a deleted record is gone")
		mustClaim(t, s, "k", "fp", longLease)
		deleted, err = s.Delete(t.Context(), store.HashKey("k"), true)
		require.NoError(t, err)
		require.True(t, deleted)
	}
}

// testDeleteRefusesLiveLease: an unforced Delete of a live lease fails
// with ErrLeaseLive and changes nothing.
func testDeleteRefusesLiveLease(t *testing.T, s store.Admin) {
	owner := mustClaim(t, s, "k", "fp", longLease)
	deleted, err := s.Delete(t.Context(), store.HashKey("k"), false)
	require.ErrorIs(t, err, store.ErrLeaseLive)
	require.False(t, deleted)
	requireInFlight(t, s, "k", "fp", longLease)
	complete(t, s, "k", owner, sampleResponse())
	requireCompleted(t, s, "k", "fp", sampleResponse())
}

// testForcedDeleteFencesTheOwnerOut: a forced Delete of a live lease lets
// the next claim win with a higher fence, and the first owner's Complete
// is refused.
func testForcedDeleteFencesTheOwnerOut(t *testing.T, s store.Admin) {
	first := mustClaim(t, s, "k", "fp", longLease)
	deleted, err := s.Delete(t.Context(), store.HashKey("k"), true)
	require.NoError(t, err)
	require.True(t, deleted)
	_, found := inspect(t, s, "k")
	require.False(t, found, "a deleted record is gone")
	second := mustClaim(t, s, "k", "fp", longLease)
	require.Greater(t, second.Fence, first.Fence, "the next claim is fenced above the deleted lease")
	requireNotOwner(t, s.Complete(t.Context(), "k", first, sampleResponse(), retention), "Complete")
	requireInFlight(t, s, "k", "fp", longLease)
}

// testDeleteMissing: deleting a key without a live record reports false
// and no error, forced or not, and keeps a lapsed lease's fence, so the
// next claim is still fenced above the owner that may still run.
func testDeleteMissing(t *testing.T, s store.Admin) {
	lapsed := mustClaim(t, s, "lapsed", "fp", shortLease)
	sleepPastShortLease()
	for _, key := range []string{"never", "lapsed"} {
		for _, force := range []bool{false, true} {
			deleted, err := s.Delete(t.Context(), store.HashKey(key), force)
			require.NoError(t, err, "Delete(%q, force %v)", key, force)
			require.False(t, deleted, "Delete(%q, force %v)", key, force)
		}
	}
	next := mustClaim(t, s, "lapsed", "fp", longLease)
	require.Greater(t, next.Fence, lapsed.Fence, "the claim after a lapsed lease is fenced above it")
}

// testFindByPrefix: Find lists the live records whose hash has the
// prefix, up to the limit, and no dead ones.
func testFindByPrefix(t *testing.T, s store.Admin) {
	var live []string
	for _, key := range []string{"a", "b", "c"} {
		owner := mustClaim(t, s, key, "fp", longLease)
		complete(t, s, key, owner, sampleResponse())
		live = append(live, store.HashKey(key))
	}
	mustClaim(t, s, "in-flight", "fp", longLease)
	live = append(live, store.HashKey("in-flight"))
	owner := mustClaim(t, s, "released", "fp", longLease)
	require.NoError(t, s.Release(t.Context(), "released", owner))

	found, err := s.Find(t.Context(), "", 10)
	require.NoError(t, err)
	require.ElementsMatch(t, live, found, "every live record, and no released one")
	found, err = s.Find(t.Context(), "", 2)
	require.NoError(t, err)
	require.Len(t, found, 2, "at most the limit")
	require.Subset(t, live, found)
	for _, hash := range live {
		found, err = s.Find(t.Context(), hash[:16], 2)
		require.NoError(t, err)
		require.Equal(t, []string{hash}, found, "the record of a 16-digit prefix")
	}
	found, err = s.Find(t.Context(), missingPrefix(live), 2)
	require.NoError(t, err)
	require.Empty(t, found, "a prefix no live hash has")
}

// missingPrefix returns a 4-digit prefix no hash in hashes has.
func missingPrefix(hashes []string) string {
	for _, p := range []string{"0000", "1111", "2222", "3333", "4444", "5555"} {
		if !slices.ContainsFunc(hashes, func(h string) bool { return h[:4] == p }) {
			return p
		}
	}
	panic("storetest: six prefixes taken by a handful of hashes")
}

// testBadHashes: a hash that is not HashKey's, or a prefix that begins
// none, is refused with ErrBadHash.
func testBadHashes(t *testing.T, s store.Admin) {
	for _, hash := range []string{"", "abc", store.HashKey("k")[:63] + "A", store.HashKey("k") + "0", "k"} {
		_, _, err := s.Inspect(t.Context(), hash)
		require.ErrorIs(t, err, store.ErrBadHash, "Inspect(%q)", hash)
		_, err = s.Delete(t.Context(), hash, true)
		require.ErrorIs(t, err, store.ErrBadHash, "Delete(%q)", hash)
	}
	for _, prefix := range []string{"G", "ab*", "AB", store.HashKey("k") + "0"} {
		_, err := s.Find(t.Context(), prefix, 1)
		require.ErrorIs(t, err, store.ErrBadHash, "Find(%q)", prefix)
	}
}
