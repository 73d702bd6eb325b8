// Package storetest is the conformance suite every store.Store backend
// runs. A backend is done when Run passes against a real instance of its
// server; the suite never needs a mock.
//
// What a backend must do to pass, in short (each test's doc says more):
//   - Claim on a missing or expired key creates an in-flight record owned
//     by the caller's token, with a fencing number of at least 1, strictly
//     higher than the previous owner's on a takeover of an expired lease
//     and on a claim after a release.
//   - Claim on a live key changes nothing and reports the record: its
//     state, the first claimer's fingerprint, the time left, the stored
//     response if there is one, and never the owner's token.
//   - Renew, Complete and Release succeed only for the exact lease (token
//     and fencing number) that holds the key in flight; anything else gets
//     an error matching store.ErrNotOwner and changes nothing, but for a
//     Complete by the lease that completed the key, which succeeds and
//     changes nothing (a call sent again after its reply was lost).
//   - Complete with a response makes the key completed, with a nil one
//     unreplayable; Release frees the key (deleting or keeping the record,
//     as the store chooses) so that the next Claim wins.
//   - Leases and retentions expire on the store's clock, and the time
//     left counts down; Renew sets the lease's end, sooner or later, and
//     nothing else moves it.
//   - Exactly one of many concurrent claims on a key wins.
//   - Responses round-trip exactly: status, every header name that has
//     values and every value (arbitrary bytes, not only UTF-8), in order,
//     and the body byte for byte. Complete copies what it keeps: the
//     caller reuses the memory.
//
// A store.TxStore runs RunTx as well as Run. To pass, BeginClaim wins a
// free or expired key with a transaction that Commit finishes (the
// response replayed exactly, or nil for unreplayable, the first
// fingerprint kept) and Rollback undoes, leaving the key free; a failed
// Commit commits nothing. While the transaction is open, every other
// Claim and BeginClaim of the key reports it in flight without waiting,
// and exactly one of many concurrent claims wins. A BeginClaim that does
// not win, or is refused for an empty token, leaves no transaction open.
// What the handler writes through the transaction is the backend's own
// to test.
//
// A store.Watcher runs RunWatch as well. To pass, Watch of an in-flight
// key is woken by its Complete and its Release, every watcher at once,
// and by nothing that leaves the key in flight.
//
// Timing: the leases and retentions the suite lets expire are 150 or 300
// ms long, and the suite sleeps well past them (400 or 800 ms) instead of
// asserting how long anything took, so a store passes if its expiry is
// never more than 250 ms late. The whole suite takes a few seconds, most
// of it in the concurrent claims. Keys are up to 512 bytes of UTF-8
// without NUL; a backend may prefix them.
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
	// pastShortLease is how long the suite sleeps for a shortLease to be
	// over on the store's clock, with a wide margin for a loaded machine,
	// millisecond expiry granularity and a database's transaction clock.
	pastShortLease = 400 * time.Millisecond
	// longLease is the lease of records that must stay in flight for the
	// whole of a test.
	longLease = time.Minute
	// retention is the retention of completed records that must stay for
	// the whole of a test.
	retention = time.Hour
)

// Run runs the conformance suite against the stores newStore returns.
//
// newStore is called once per subtest, one call at a time, before the
// subtest calls t.Parallel, so it must not call t.Parallel itself. It must
// return a fresh store isolated from every other one it returned (its own
// key prefix, table or database), because subtests run in parallel and
// reuse the same keys. It may register cleanup with t.Cleanup, and may skip
// with t.Skip when its server is not configured.
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

// runCases runs each case as a parallel subtest, on a store newStore
// returns for it before the subtest calls t.Parallel.
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

// claim calls s.Claim with a fresh token and requires it to succeed
// without error. It returns the token with the results.
func claim(t *testing.T, s store.Store, key, fingerprint string, lease time.Duration) (rec store.Record, claimed bool, token string) {
	t.Helper()
	token = newToken()
	rec, claimed, err := s.Claim(t.Context(), key, fingerprint, token, lease)
	require.NoError(t, err, "Claim(%q)", key)
	return rec, claimed, token
}

// mustClaim claims key, which must be missing or expired, and returns the
// lease the store granted. The store must report the claim as won, in
// flight, under the caller's token, with the caller's fingerprint, a
// fencing number of at least 1 and the whole lease left.
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

// mustLose claims key, which must be live, and returns what the store
// reports. The claim must not win, and the record must not carry the
// owner's token.
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

// requireInFlightRecord requires a lost claim's record to be in flight,
// claimed with fingerprint, with at most lease left.
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

// complete completes key for owner with resp and the suite's retention,
// and requires it to succeed.
func complete(t *testing.T, s store.Store, key string, owner store.Lease, resp *store.Response) {
	t.Helper()
	require.NoError(t, s.Complete(t.Context(), key, owner, resp, retention), "Complete(%q) by its owner", key)
}

// requireTTL requires a reported time left to be positive and no more than
// the lease or retention it was set to.
func requireTTL(t *testing.T, ttl, most time.Duration) {
	t.Helper()
	require.Positive(t, ttl, "a live record has time left")
	require.LessOrEqual(t, ttl, most, "time left cannot exceed the lease or retention set")
}

// requireNotOwner requires err to match store.ErrNotOwner; op names the
// call in the failure message.
func requireNotOwner(t *testing.T, err error, op string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrNotOwner, "%s by a lease that does not hold the key", op)
}

// sleepPastShortLease waits until a shortLease set before the call is over
// on the store's clock.
func sleepPastShortLease() { time.Sleep(pastShortLease) }
