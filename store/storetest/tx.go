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
	// waits for an open transaction, which no claim may do.
	holdOff = 10 * time.Second
	// leakProbes refused or lost BeginClaims in a row, more than a pool
	// holds connections, show that none leaves a transaction open.
	leakProbes = 64
	// plainRacers of the racers on a key call Claim, not BeginClaim.
	plainRacers = 4
	// txRaceRounds new keys, and half as many expired ones, are raced on.
	txRaceRounds = 40
)

// RunTx runs the conformance suite of store.TxStore's own methods against
// the stores newStore returns, with Run's rules for newStore. A subtest
// holds at most two transactions open, besides its racers'; a claim that
// has not returned within ten seconds fails as waiting for one.
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

// testTxClaimNewKey: BeginClaim on a key never seen wins.
func testTxClaimNewKey(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "new", "fp-new").rollback(t)
}

// testTxEmptyTokenOpensNothing: BeginClaim under an empty token fails with
// store.ErrEmptyToken and leaves no transaction open.
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
// other claim of it reports it in flight at once and changes nothing.
func testTxHeldKeyIsInFlightAtOnce(t *testing.T, s store.TxStore) {
	tx := mustBeginClaim(t, s, "held", "fp")
	requireHeldByTx(t, s, "held", "fp")
	resp := sampleResponse()
	tx.commit(t, resp, retention)
	requireFinished(t, s, "held", "fp", resp)
}

// testTxHoldsOnlyItsKey: a transaction holds only its key.
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

// testTxCommitStoresTheResponse: after Commit, every claim gets the
// response exactly.
func testTxCommitStoresTheResponse(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "done", "fp").commit(t, committedResponse(), retention)
	for range 3 {
		requireFinished(t, s, "done", "fp", committedResponse())
	}
}

// testTxCommitNilIsUnreplayable: Commit with a nil response makes the key
// unreplayable.
func testTxCommitNilIsUnreplayable(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "huge", "fp").commit(t, nil, retention)
	requireFinished(t, s, "huge", "fp", nil)
}

// testTxFinishedKeepsFingerprint: a committed record reports the winning
// claim's fingerprint to every later claim.
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

// testTxRollbackFreesTheKey: Rollback leaves nothing of the claim.
func testTxRollbackFreesTheKey(t *testing.T, s store.TxStore) {
	mustBeginClaim(t, s, "k", "fp-first").rollback(t)
	mustBeginClaim(t, s, "k", "fp-second").rollback(t)
	mustClaim(t, s, "k", "fp-third", longLease)
}

// testTxFailedCommitCommitsNothing: a Commit that fails (under a canceled
// context) commits nothing, and a Rollback after it succeeds. Once the
// store has ended the transaction, within holdOff, the next BeginClaim
// wins. A store that commits under a canceled context must report the key
// completed.
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
// transaction open.
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

// testTxExpiredRecordsAreClaimed: BeginClaim takes over a lapsed lease,
// with a higher fencing number, and a completed record past its retention.
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

// testTxPlainClaimHoldsOff: BeginClaim sees a key a plain Claim holds as
// Claim does, and after a Release wins it with a higher fencing number.
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
