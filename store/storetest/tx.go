package storetest

import (
	"context"
	"fmt"
	"sync"
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

// openTx is a transaction a won BeginClaim opened. The test ends it with
// commit or rollback; if a failed assertion stops the test first, its
// cleanup rolls it back, so that no transaction outlives the test.
type openTx struct {
	tx    store.Tx
	owner store.Lease
	ended bool
}

// track returns tx as an openTx whose cleanup is registered on t.
func track(t *testing.T, tx store.Tx, owner store.Lease) *openTx {
	o := &openTx{tx: tx, owner: owner}
	t.Cleanup(func() {
		if !o.ended {
			_ = o.tx.Rollback(context.Background())
		}
	})
	return o
}

// commit commits the transaction with resp kept for retention, and
// requires it to succeed.
func (o *openTx) commit(t *testing.T, resp *store.Response, retention time.Duration) {
	t.Helper()
	o.ended = true
	require.NoError(t, o.tx.Commit(t.Context(), resp, retention), "Commit of the transaction holding the key")
}

// rollback rolls the transaction back and requires it to succeed.
func (o *openTx) rollback(t *testing.T) {
	t.Helper()
	o.ended = true
	require.NoError(t, o.tx.Rollback(t.Context()), "Rollback of the transaction holding the key")
}

// atOnce runs call and fails the test if it has not returned within
// holdOff. call runs in a goroutine of its own, so that the test fails
// even if call never returns.
func atOnce(t *testing.T, what string, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	select {
	case <-done:
	case <-time.After(holdOff):
		require.FailNow(t, what+" waited for an open transaction", "no answer within %v", holdOff)
	}
}

// beginClaim calls s.BeginClaim at once with a fresh token and requires it
// to succeed without error. A won claim's transaction is tracked (see
// openTx); tx is nil when the claim lost.
func beginClaim(t *testing.T, s store.TxStore, key, fingerprint string) (txCtx context.Context, rec store.Record, tx *openTx) {
	t.Helper()
	var (
		raw store.Tx
		err error
	)
	atOnce(t, fmt.Sprintf("BeginClaim(%q)", key), func() {
		txCtx, rec, raw, err = s.BeginClaim(t.Context(), key, fingerprint, newToken())
	})
	if raw != nil {
		tx = track(t, raw, rec.Owner)
	}
	require.NoError(t, err, "BeginClaim(%q)", key)
	return txCtx, rec, tx
}

// mustBeginClaim claims key, which must be free or expired, in a
// transaction. The store must return the transaction, the context carrying
// it, and an in-flight record with the caller's fingerprint, a fencing
// number of at least 1 and no response.
func mustBeginClaim(t *testing.T, s store.TxStore, key, fingerprint string) *openTx {
	t.Helper()
	txCtx, rec, tx := beginClaim(t, s, key, fingerprint)
	require.NotNil(t, tx, "BeginClaim(%q) on a free or expired key must win; got %+v", key, rec)
	require.NotNil(t, txCtx, "a won BeginClaim returns the context carrying its transaction")
	require.Equal(t, store.StateInFlight, rec.State, "state of a won BeginClaim")
	require.Equal(t, fingerprint, rec.Fingerprint, "fingerprint of a won BeginClaim")
	require.GreaterOrEqual(t, rec.Owner.Fence, int64(1), "fencing numbers start at 1")
	require.Nil(t, rec.Response, "a won BeginClaim has no response")
	return tx
}

// mustBeginLose calls BeginClaim on key, which must be live, and returns
// what the store reports: no transaction, and not the owner's token.
func mustBeginLose(t *testing.T, s store.TxStore, key, fingerprint string) store.Record {
	t.Helper()
	_, rec, tx := beginClaim(t, s, key, fingerprint)
	require.Nil(t, tx, "BeginClaim(%q) on a live key must not win; got %+v", key, rec)
	require.Empty(t, rec.Owner.Token, "a lost BeginClaim must not reveal the owner's token")
	return rec
}

// claimAtOnce calls s.Claim at once with a fresh token and requires it to
// succeed without error.
func claimAtOnce(t *testing.T, s store.Store, key, fingerprint string) (rec store.Record, claimed bool) {
	t.Helper()
	var err error
	atOnce(t, fmt.Sprintf("Claim(%q)", key), func() {
		rec, claimed, err = s.Claim(t.Context(), key, fingerprint, newToken(), longLease)
	})
	require.NoError(t, err, "Claim(%q)", key)
	return rec, claimed
}

// requireHeldByTx requires key, which an open transaction holds, to be
// reported in flight at once by BeginClaim and by Claim, under the
// holder's fingerprint and another: no transaction, no token, no response,
// and a TTL that may be zero. The fingerprint is not checked, since the
// holder's record may not be readable before it commits.
func requireHeldByTx(t *testing.T, s store.TxStore, key, fingerprint string) {
	t.Helper()
	for _, fp := range []string{fingerprint, "other-" + fingerprint} {
		rec := mustBeginLose(t, s, key, fp)
		requireHeldRecord(t, rec, "BeginClaim")
		rec, claimed := claimAtOnce(t, s, key, fp)
		require.False(t, claimed, "Claim(%q) of a key an open transaction holds must not win; got %+v", key, rec)
		require.Empty(t, rec.Owner.Token, "a lost claim must not reveal the owner's token")
		requireHeldRecord(t, rec, "Claim")
	}
}

// requireHeldRecord requires what a lost claim (op) reports of a key an
// open transaction holds.
func requireHeldRecord(t *testing.T, rec store.Record, op string) {
	t.Helper()
	require.Equal(t, store.StateInFlight, rec.State, "%s of a key an open transaction holds", op)
	require.Nil(t, rec.Response, "an in-flight record has no response")
	require.GreaterOrEqual(t, rec.TTL, time.Duration(0), "time left")
	require.LessOrEqual(t, rec.TTL, longLease, "time left")
}

// requireFinished requires key to be finished, claimed with fingerprint,
// with want as its response (nil: unreplayable), as both Claim and
// BeginClaim report it to a claim with another fingerprint.
func requireFinished(t *testing.T, s store.TxStore, key, fingerprint string, want *store.Response) {
	t.Helper()
	other := "other-" + fingerprint
	for _, rec := range []store.Record{mustLose(t, s, key, other), mustBeginLose(t, s, key, other)} {
		require.Equal(t, fingerprint, rec.Fingerprint, "a finished record keeps the first claim's fingerprint")
		requireTTL(t, rec.TTL, retention)
		if want == nil {
			require.Equal(t, store.StateUnreplayable, rec.State, "state of %q committed without a response", key)
			require.Nil(t, rec.Response, "an unreplayable record has no response")
			continue
		}
		require.Equal(t, store.StateCompleted, rec.State, "state of %q", key)
		requireSameResponse(t, want, rec.Response)
	}
}

// committedResponse is sampleResponse with a body of every byte value.
func committedResponse() *store.Response {
	resp := sampleResponse()
	resp.Body = make([]byte, 256)
	for i := range resp.Body {
		resp.Body[i] = byte(i)
	}
	return resp
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

// beginClaimWhenFree calls BeginClaim on key until it wins, for at most
// holdOff, and requires key to be in flight, never finished, until then.
func beginClaimWhenFree(t *testing.T, s store.TxStore, key, fingerprint string) *openTx {
	t.Helper()
	deadline := time.Now().Add(holdOff)
	for {
		_, rec, tx := beginClaim(t, s, key, fingerprint)
		if tx != nil {
			require.Equal(t, fingerprint, rec.Fingerprint, "fingerprint of a won BeginClaim")
			return tx
		}
		require.Equal(t, store.StateInFlight, rec.State, "%q after a failed Commit: nothing was committed", key)
		require.True(t, time.Now().Before(deadline), "%q still held %v after its transaction failed", key, holdOff)
		time.Sleep(10 * time.Millisecond)
	}
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

// txAttempt is one racer's BeginClaim, or Claim, and its outcome.
type txAttempt struct {
	plain bool
	rec   store.Record
	tx    *openTx
	won   bool
	err   error
}

// raceTx has racers goroutines, released at once, claim key with distinct
// fingerprints and tokens, plainRacers of them with Claim and the others
// with BeginClaim. It requires every claim to return at once without
// error, exactly one to win, and every loser to see the key in flight. The
// winner then finishes the key without a response, and a later claim must
// find it so. It returns the winner's fencing number.
func raceTx(t *testing.T, s store.TxStore, key string) int64 {
	t.Helper()
	attempts := make([]txAttempt, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		a := &attempts[i]
		a.plain = i < plainRacers
		fingerprint := fmt.Sprintf("fp-%s-%d", key, i)
		wg.Go(func() {
			<-start
			if a.plain {
				a.rec, a.won, a.err = s.Claim(t.Context(), key, fingerprint, newToken(), longLease)
				return
			}
			var tx store.Tx
			_, a.rec, tx, a.err = s.BeginClaim(t.Context(), key, fingerprint, newToken())
			if tx != nil {
				// Tracked here, so that cleanup ends it even if the test
				// stops waiting for the others.
				a.tx, a.won = track(t, tx, a.rec.Owner), true
			}
		})
	}
	close(start)
	atOnce(t, fmt.Sprintf("%d concurrent claims of %q", racers, key), wg.Wait)

	var winner *txAttempt
	for i := range attempts {
		a := &attempts[i]
		require.NoError(t, a.err, "concurrent claim of %q", key)
		if a.won {
			require.Nil(t, winner, "two concurrent claims of %q won", key)
			winner = a
			continue
		}
		require.Equal(t, store.StateInFlight, a.rec.State, "a losing claim of %q", key)
		require.Empty(t, a.rec.Owner.Token, "a losing claim must not reveal the owner's token")
	}
	require.NotNil(t, winner, "no concurrent claim of %q won", key)
	if winner.plain {
		complete(t, s, key, winner.rec.Owner, nil)
	} else {
		winner.tx.commit(t, nil, retention)
	}
	require.Equal(t, store.StateUnreplayable, mustLose(t, s, key, "fp-after").State, "%q after its winner finished", key)
	return winner.rec.Owner.Fence
}

// testTxConcurrentClaimsOneWinner: of racers goroutines claiming one key
// at the same moment, most with BeginClaim and some with Claim, exactly
// one wins, on each of txRaceRounds new keys and of half as many whose
// lease has expired, where the winner's fencing number is higher.
func testTxConcurrentClaimsOneWinner(t *testing.T, s store.TxStore) {
	expired := make([]store.Lease, txRaceRounds/2)
	for i := range expired {
		expired[i] = mustClaim(t, s, fmt.Sprint("expired-", i), "fp-expired", shortLease)
	}
	sleepPastShortLease()
	for round := range txRaceRounds {
		require.GreaterOrEqual(t, raceTx(t, s, fmt.Sprint("new-", round)), int64(1))
	}
	for i, old := range expired {
		require.Greater(t, raceTx(t, s, fmt.Sprint("expired-", i)), old.Fence, "a takeover gets a higher fencing number")
	}
}
