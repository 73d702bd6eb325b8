package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

const (
	// holdOff is how long a claim may take before the suite decides it
	// waits for an open transaction, which no claim may do (see
	// store.TxStore). Claims take far less, so only one that waits for
	// the transaction to end reaches it.
	holdOff = 10 * time.Second
	// leakProbes is how many refused or lost BeginClaims the suite makes in
	// a row to show that they leave no transaction open: more than a
	// database pool holds connections.
	leakProbes = 64
	// plainRacers is how many of the racers on a key call Claim instead of
	// BeginClaim.
	plainRacers = 4
	// txRaceRounds is how many new keys, and half as many expired ones,
	// ConcurrentBeginClaimsOneWinner races on.
	txRaceRounds = 40
)

// RunTx runs the conformance suite of store.TxStore's own methods against
// the stores newStore returns, under the same rules as Run's newStore.
// The plain Store methods of a TxStore are Run's to test, and the
// handler's writes through the transaction the backend's own. A subtest
// holds at most two transactions open at once, and the race racers; a
// claim that has not returned within ten seconds fails as waiting for an
// open transaction.
func RunTx(t *testing.T, newStore func(t *testing.T) store.TxStore) {
	runCases(t, newStore, []suiteCase[store.TxStore]{
		{"BeginClaimNewKey", testTxClaimNewKey},
		{"EmptyTokenOpensNothing", testTxEmptyTokenOpensNothing},
		{"HeldKeyIsInFlightAtOnce", testTxHeldKeyIsInFlightAtOnce},
		{"TransactionHoldsOnlyItsKey", testTxHoldsOnlyItsKey},
		{"CommitStoresTheResponse", testTxCommitStoresTheResponse},
		{"CommitNilIsUnreplayable", testTxCommitNilIsUnreplayable},
		{"FinishedKeyKeepsItsFingerprint", testTxFinishedKeepsFingerprint},
		{"RollbackFreesTheKey", testTxRollbackFreesTheKey},
		{"FailedCommitCommitsNothing", testTxFailedCommitCommitsNothing},
		{"LostBeginClaimLeavesNothingOpen", testTxLostClaimLeavesNothingOpen},
		{"ExpiredRecordsAreClaimed", testTxExpiredRecordsAreClaimed},
		{"PlainClaimHoldsOffBeginClaim", testTxPlainClaimHoldsOff},
		{"ConcurrentBeginClaimsOneWinner", testTxConcurrentClaimsOneWinner},
	})
}

// testTxClaimNewKey: BeginClaim on a key never seen wins: it returns a
// transaction, the context carrying it, and an in-flight record with the
// caller's fingerprint and a fencing number of at least 1.
func testTxClaimNewKey(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "new", "fp-new").rollback(t)
}

// testTxEmptyTokenOpensNothing: BeginClaim under an empty token fails with
// store.ErrEmptyToken and returns no transaction, and opens none: after
// leakProbes refusals, BeginClaim still wins the key at once.
func testTxEmptyTokenOpensNothing(t *testing.T, s store.TxStore) {
	for range leakProbes {
		var (
			tx  store.Tx
			err error
		)
		atOnce(t, "BeginClaim under an empty token", func() {
			_, _, tx, err = s.BeginClaim(t.Context(), "k", "fp", "")
		})
		if tx != nil {
			track(t, tx, store.Lease{})
		}
		require.ErrorIs(t, err, store.ErrEmptyToken)
		require.Nil(t, tx, "an empty token claims nothing")
	}
	mustBeginClaim(t, s, "k", "fp").rollback(t)
}

// testTxHeldKeyIsInFlightAtOnce: while a transaction holds a key, every
// other BeginClaim and Claim of it, under the holder's fingerprint or
// another, reports it in flight without waiting for the transaction to
// end, and changes nothing: the holder then commits its response.
func testTxHeldKeyIsInFlightAtOnce(t *testing.T, s store.TxStore) {
	tx := mustBeginClaim(t, s, "held", "fp")
	requireHeldByTx(t, s, "held", "fp")
	resp := sampleResponse()
	tx.commit(t, resp, retention)
	requireFinished(t, s, "held", "fp", resp)
}

// testTxHoldsOnlyItsKey: transactions on two keys are open at once while a
// plain Claim wins a third: a transaction holds only its key. Each key
// then ends as its holder ended it.
func testTxHoldsOnlyItsKey(t *testing.T, s store.TxStore) {
	a := mustBeginClaim(t, s, "a", "fp-a")
	b := mustBeginClaim(t, s, "b", "fp-b")
	rec, claimed := claimAtOnce(t, s, "c", "fp-c")
	require.True(t, claimed, "Claim of a key no transaction holds must win; got %+v", rec)

	a.commit(t, keyedResponse("a"), retention)
	b.rollback(t)
	complete(t, s, "c", rec.Owner, keyedResponse("c"))
	requireFinished(t, s, "a", "fp-a", keyedResponse("a"))
	mustBeginClaim(t, s, "b", "fp-b-again").rollback(t)
	requireFinished(t, s, "c", "fp-c", keyedResponse("c"))
}

// testTxCommitStoresTheResponse: Commit with a response makes the key
// completed for the retention given, and every later Claim and BeginClaim
// gets the response exactly (status, headers in order, every body byte),
// as often as it is asked.
func testTxCommitStoresTheResponse(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "done", "fp").commit(t, committedResponse(), retention)
	for range 3 {
		requireFinished(t, s, "done", "fp", committedResponse())
	}
}

// testTxCommitNilIsUnreplayable: Commit with a nil response marks the key
// done but unreplayable, for the retention given: later claims lose and
// get store.StateUnreplayable and no response.
func testTxCommitNilIsUnreplayable(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "huge", "fp").commit(t, nil, retention)
	requireFinished(t, s, "huge", "fp", nil)
}

// testTxFinishedKeepsFingerprint: a record a transaction committed, with
// or without a response, reports the fingerprint of the claim that won it
// to every later claim, whether it comes with the same fingerprint or
// another, so that the caller can tell a reused key.
func testTxFinishedKeepsFingerprint(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "replayable", "fp-first").commit(t, sampleResponse(), retention)
	mustBeginClaim(t, s, "unreplayable", "fp-first").commit(t, nil, retention)
	for _, key := range []string{"replayable", "unreplayable"} {
		for _, fp := range []string{"fp-first", "fp-second"} {
			require.Equal(t, "fp-first", mustLose(t, s, key, fp).Fingerprint, "Claim(%q) with %q", key, fp)
			require.Equal(t, "fp-first", mustBeginLose(t, s, key, fp).Fingerprint, "BeginClaim(%q) with %q", key, fp)
		}
	}
}

// testTxRollbackFreesTheKey: Rollback undoes the claim, so that nothing of
// it is left: the next BeginClaim wins with its own fingerprint, and after
// that one's Rollback too, a plain Claim.
func testTxRollbackFreesTheKey(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "k", "fp-first").rollback(t)
	mustBeginClaim(t, s, "k", "fp-second").rollback(t)
	mustClaim(t, s, "k", "fp-third", longLease)
}

// testTxFailedCommitCommitsNothing: a Commit that fails (here under a
// context already canceled) commits nothing, and a Rollback after it is a
// no-op that succeeds. The key is never reported finished; once the store
// has ended the transaction (at once, or when its server notices a closed
// connection, within holdOff), the next BeginClaim wins. A store that
// commits under a canceled context has no failed Commit to show, and must
// then report the key completed.
func testTxFailedCommitCommitsNothing(t *testing.T, s store.TxStore) {
	tx := mustBeginClaim(t, s, "k", "fp-first")
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tx.ended = true
	if err := tx.tx.Commit(canceled, sampleResponse(), retention); err == nil {
		t.Log("Commit succeeded under a canceled context; no failed Commit to test")
		requireFinished(t, s, "k", "fp-first", sampleResponse())
		return
	}
	require.NoError(t, tx.tx.Rollback(t.Context()), "Rollback after a failed Commit is a no-op")

	retry := beginClaimWhenFree(t, s, "k", "fp-retry")
	retry.commit(t, keyedResponse("k"), retention)
	requireFinished(t, s, "k", "fp-retry", keyedResponse("k"))
}

// testTxLostClaimLeavesNothingOpen: a BeginClaim that loses leaves no
// transaction open. After leakProbes lost claims of a completed key, a
// plain Claim still gets the stored response (no transaction holds the
// key), and BeginClaim still wins a free key at once.
func testTxLostClaimLeavesNothingOpen(t *testing.T, s store.TxStore) {
	resp := sampleResponse()
	mustBeginClaim(t, s, "done", "fp").commit(t, resp, retention)
	for range leakProbes {
		rec := mustBeginLose(t, s, "done", "fp-other")
		require.Equal(t, store.StateCompleted, rec.State)
	}
	requireCompleted(t, s, "done", "fp", resp)
	mustBeginClaim(t, s, "free", "fp").rollback(t)
}

// testTxExpiredRecordsAreClaimed: BeginClaim wins a key whose in-flight
// lease has ended, with a higher fencing number than the lapsed owner's,
// whose lapsed lease is then refused; and a key whose completed record's
// retention has ended, whether a Commit or a Complete stored it.
func testTxExpiredRecordsAreClaimed(t *testing.T, s store.TxStore) {
	lapsed := mustClaim(t, s, "lease", "fp-old", shortLease)
	mustBeginClaim(t, s, "retention-commit", "fp-old").commit(t, sampleResponse(), shortLease)
	done := mustClaim(t, s, "retention-complete", "fp-old", longLease)
	require.NoError(t, s.Complete(t.Context(), "retention-complete", done, sampleResponse(), shortLease))
	sleepPastShortLease()

	takeover := mustBeginClaim(t, s, "lease", "fp-new")
	require.Greater(t, takeover.owner.Fence, lapsed.Fence, "a takeover of an expired lease gets a higher fencing number")
	takeover.commit(t, keyedResponse("lease"), retention)
	requireNotOwner(t, s.Complete(t.Context(), "lease", lapsed, nil, retention), "Complete")
	requireFinished(t, s, "lease", "fp-new", keyedResponse("lease"))
	for _, key := range []string{"retention-commit", "retention-complete"} {
		mustBeginClaim(t, s, key, "fp-new").rollback(t)
	}
}

// testTxPlainClaimHoldsOff: a key a plain Claim holds in flight is in
// flight for BeginClaim at once, reported as Claim reports it (the plain
// claim's fingerprint, its lease's time left); once completed, BeginClaim
// gets the response. After a Release, BeginClaim wins with a higher
// fencing number than the released lease's.
func testTxPlainClaimHoldsOff(t *testing.T, s store.TxStore) {
	owner := mustClaim(t, s, "plain", "fp-plain", longLease)
	requireInFlightRecord(t, mustBeginLose(t, s, "plain", "fp-tx"), "fp-plain", longLease)
	resp := sampleResponse()
	complete(t, s, "plain", owner, resp)
	requireFinished(t, s, "plain", "fp-plain", resp)

	released := mustClaim(t, s, "released", "fp-plain", longLease)
	require.NoError(t, s.Release(t.Context(), "released", released))
	tx := mustBeginClaim(t, s, "released", "fp-tx")
	require.Greater(t, tx.owner.Fence, released.Fence, "a claim after a release gets a higher fencing number")
	tx.rollback(t)
}
