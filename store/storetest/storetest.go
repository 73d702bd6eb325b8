// Package storetest is the conformance suite of store backends: Run for a
// store.Store, RunTx for a store.TxStore, RunWatch for a store.Watcher. A
// backend is done when they pass against a real instance of its server;
// each test's doc states the rule it checks.
//
// The leases and retentions the suite lets expire last 150 or 300 ms, and
// it sleeps 400 or 800 ms instead of timing anything, so a store passes if
// its expiry is never more than 250 ms late.
package storetest

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

const (
	// shortLease is the lease or retention of records the suite lets
	// expire.
	shortLease = 150 * time.Millisecond
	// pastShortLease is how long the suite sleeps for a shortLease to end,
	// with margin for a loaded machine and a database's transaction clock.
	pastShortLease = 400 * time.Millisecond
	// longLease and retention outlast any test.
	longLease = time.Minute
	retention = time.Hour
)

// Run runs the conformance suite against the stores newStore returns.
// newStore is called once per subtest, before the subtest calls t.Parallel
// (so it must not call it), and must return a store isolated from the
// others (its own key prefix, table or database): subtests run in parallel
// on the same keys. It may register cleanups and call t.Skip.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	runCases(t, newStore, []suiteCase[store.Store]{
		{"ClaimNewKey", testClaimNewKey},
		{"ClaimInFlightKey", testClaimInFlightKey},
		{"ClaimCompletedKey", testClaimCompletedKey},
		{"CompleteNilIsUnreplayable", testCompleteNilIsUnreplayable},
		{"DistinctKeysAreIndependent", testDistinctKeysAreIndependent},
		{"LeaseOpsOnMissingKey", testLeaseOpsOnMissingKey},
		{"LeaseOpsOnCompletedKey", testLeaseOpsOnCompletedKey},
		{"WrongLeaseIsRefused", testWrongLeaseIsRefused},
		{"RenewExtendsLease", testRenewExtendsLease},
		{"ReleaseLetsNextClaimWin", testReleaseLetsNextClaimWin},
		{"ReleasedKeyHasNoOwner", testReleasedKeyHasNoOwner},
		{"EmptyTokenIsRefused", testEmptyTokenIsRefused},
		{"ClaimAgainUnderOwnToken", testClaimAgainUnderOwnToken},
		{"TakeoverAfterLeaseExpiry", testTakeoverAfterLeaseExpiry},
		{"StaleRenewIsRefused", testStaleRenewIsRefused},
		{"StaleCompleteIsRefused", testStaleCompleteIsRefused},
		{"StaleReleaseIsRefused", testStaleReleaseIsRefused},
		{"FencesNeverGoBack", testFencesNeverGoBack},
		{"CompletedRecordExpires", testCompletedRecordExpires},
		{"ClaimAgainKeepsTheLease", testClaimAgainKeepsTheLease},
		{"OwnTokenAfterCompleteLoses", testOwnTokenAfterCompleteLoses},
		{"TTLCountsDown", testTTLCountsDown},
		{"LosingClaimChangesNothing", testLosingClaimChangesNothing},
		{"RenewSetsTheLeaseFromNow", testRenewSetsTheLeaseFromNow},
		{"RefusedRenewChangesNothing", testRefusedRenewChangesNothing},
		{"RetentionOutlivesTheLease", testRetentionOutlivesTheLease},
		{"ExpiryKeepsLiveRecords", testExpiryKeepsLiveRecords},
		{"ConcurrentClaimsOneWinner", testConcurrentClaimsOneWinner},
		{"ConcurrentTakeoversOneWinner", testConcurrentTakeoversOneWinner},
		{"ManyKeysAtOnce", testManyKeysAtOnce},
		{"BinaryBodiesRoundTrip", testBinaryBodiesRoundTrip},
		{"HeadersRoundTrip", testHeadersRoundTrip},
		{"ResponseIsOnlyLent", testResponseIsOnlyLent},
	})
}

// suiteCase is one test of a suite, run against a store of type S.
type suiteCase[S any] struct {
	name string
	run  func(t *testing.T, s S)
}

// runCases runs each case as a parallel subtest on a store of its own.
func runCases[S any](t *testing.T, newStore func(t *testing.T) S, cases []suiteCase[S]) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Parallel()
			tc.run(t, s)
		})
	}
}

// newToken returns a random owner token, as the middleware makes one.
func newToken() string { return rand.Text() }

// claim calls s.Claim with a fresh token, requiring no error.
func claim(t *testing.T, s store.Store, key, fingerprint string, lease time.Duration) (rec store.Record, claimed bool, token string) {
	t.Helper()
	token = newToken()
	rec, claimed, err := s.Claim(t.Context(), key, fingerprint, token, lease)
	require.NoError(t, err, "Claim(%q)", key)
	return rec, claimed, token
}

// mustClaim requires a claim of key, missing or expired, to win, and
// returns the lease.
func mustClaim(t *testing.T, s store.Store, key, fingerprint string, lease time.Duration) store.Lease {
	t.Helper()
	rec, claimed, token := claim(t, s, key, fingerprint, lease)
	require.True(t, claimed, "Claim(%q) on a missing or expired key must win; got %+v", key, rec)
	require.Equal(t, store.StateInFlight, rec.State, "state of a won claim")
	require.Equal(t, fingerprint, rec.Fingerprint, "fingerprint of a won claim")
	require.Equal(t, token, rec.Owner.Token, "a won claim returns the caller's token")
	require.GreaterOrEqual(t, rec.Owner.Fence, int64(1), "fencing numbers start at 1")
	require.Nil(t, rec.Response, "a won claim has no response")
	requireTTL(t, rec.TTL, lease)
	return rec.Owner
}

// mustLose requires a claim of key, which is live, to lose, and returns
// the record.
func mustLose(t *testing.T, s store.Store, key, fingerprint string) store.Record {
	t.Helper()
	rec, claimed, _ := claim(t, s, key, fingerprint, longLease)
	require.False(t, claimed, "Claim(%q) on a live key must not win; got %+v", key, rec)
	require.Empty(t, rec.Owner.Token, "a lost claim must not reveal the owner's token")
	return rec
}

// requireInFlight requires key to be live and in flight, claimed with
// fingerprint, with at most lease left.
func requireInFlight(t *testing.T, s store.Store, key, fingerprint string, lease time.Duration) {
	t.Helper()
	requireInFlightRecord(t, mustLose(t, s, key, "other-"+fingerprint), fingerprint, lease)
}

// requireInFlightRecord is requireInFlight on a lost claim's record.
func requireInFlightRecord(t *testing.T, rec store.Record, fingerprint string, lease time.Duration) {
	t.Helper()
	require.Equal(t, store.StateInFlight, rec.State, "state of the record holding the key")
	require.Equal(t, fingerprint, rec.Fingerprint, "a lost claim reports the first claim's fingerprint")
	require.Nil(t, rec.Response, "an in-flight record has no response")
	requireTTL(t, rec.TTL, lease)
}

// requireCompleted requires key to be live and completed, claimed with
// fingerprint, with want as its stored response.
func requireCompleted(t *testing.T, s store.Store, key, fingerprint string, want *store.Response) {
	t.Helper()
	rec := mustLose(t, s, key, "other-"+fingerprint)
	require.Equal(t, store.StateCompleted, rec.State, "state of %q", key)
	require.Equal(t, fingerprint, rec.Fingerprint, "a lost claim reports the first claim's fingerprint")
	requireTTL(t, rec.TTL, retention)
	requireSameResponse(t, want, rec.Response)
}

// complete completes key for owner with resp, requiring no error.
func complete(t *testing.T, s store.Store, key string, owner store.Lease, resp *store.Response) {
	t.Helper()
	require.NoError(t, s.Complete(t.Context(), key, owner, resp, retention), "Complete(%q) by its owner", key)
}

// requireTTL requires 0 < ttl <= most.
func requireTTL(t *testing.T, ttl, most time.Duration) {
	t.Helper()
	require.Positive(t, ttl, "a live record has time left")
	require.LessOrEqual(t, ttl, most, "time left cannot exceed the lease or retention set")
}

// requireNotOwner requires err, returned by op, to match store.ErrNotOwner.
func requireNotOwner(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrNotOwner, "%s by a lease that does not hold the key", op)
}

// sleepPastShortLease waits until a shortLease set before the call is over
// on the store's clock.
func sleepPastShortLease() { time.Sleep(pastShortLease) }
