package sqlitestore

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestClaimTxEnds: the handler's rows commit with the record, or roll back
// with the claim, leaving the key free at once.
func TestClaimTxEnds(t *testing.T) {
	for _, c := range []struct {
		name   string
		commit bool
		runs   []string
	}{
		{"commit", true, []string{"first"}},
		{"rollback", false, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestTxStore(t)
			txCtx, rec, tx, err := s.BeginClaim(t.Context(), "k", "fp", "first")
			require.NoError(t, err)
			require.NotNil(t, tx)
			assert.Equal(t, store.Lease{Token: "first", Fence: 1}, rec.Owner)
			q, err := Tx(txCtx)
			require.NoError(t, err)
			_, err = q.ExecContext(txCtx, `INSERT INTO ledger (key, run) VALUES ('k', 'first')`)
			require.NoError(t, err)
			assert.Empty(t, ledgerRuns(t, s.db, "k"), "the row is not visible before the commit")
			requireInFlightAtOnce(t, s.Store, "k")

			resp := &store.Response{Status: http.StatusCreated, Body: []byte("first")}
			if c.commit {
				require.NoError(t, tx.Commit(t.Context(), resp, time.Hour))
			} else {
				require.NoError(t, tx.Rollback(t.Context()))
			}
			require.NoError(t, tx.Rollback(t.Context()), "a second ending does nothing")
			assert.Equal(t, c.runs, ledgerRuns(t, s.db, "k"))
			got, claimed, err := s.Claim(t.Context(), "k", "fp", "second", time.Minute)
			require.NoError(t, err)
			assert.Equal(t, !c.commit, claimed, "the key is free at once after a rollback, and only then")
			if c.commit {
				assert.Equal(t, resp, got.Response)
			}
		})
	}
}

// requireInFlightAtOnce requires a claim of key, which a transaction
// holds, to report it in flight within 5 s: the tests hold the write lock
// until they commit, so a claim that waited for it would never return.
func requireInFlightAtOnce(t *testing.T, s store.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rec, claimed, err := s.Claim(ctx, key, "fp", "duplicate", time.Minute)
	require.NoError(t, err, "a duplicate is answered without waiting for the write lock")
	require.False(t, claimed)
	require.Equal(t, store.StateInFlight, rec.State)
}

// TestClaimTxWriteLockHoldsOffOtherWrites shows the cost of the mode:
// while a request's transaction holds the file's write lock, a claim of
// another key waits for it, here past a busy timeout of 200 ms, and is
// answered in flight (the caller's 409), and wins once the transaction
// commits.
func TestClaimTxWriteLockHoldsOffOtherWrites(t *testing.T) {
	path := testFile(t)
	s := newTestTxStoreOn(t, path)
	db, err := Open(t.Context(), path, 200*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	other := New(db)

	txCtx, _, tx, err := s.BeginClaim(t.Context(), "k", "fp", "first")
	require.NoError(t, err)
	_, err = Tx(txCtx)
	require.NoError(t, err)
	rec, claimed, err := other.Claim(t.Context(), "new", "fp", "waiting", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: "fp"}, rec)
	requireInFlightAtOnce(t, other, "k")

	require.NoError(t, tx.Commit(t.Context(), nil, time.Hour))
	mustClaim(t, other, "new", "waiting", time.Minute)
}

// TestClaimTxRenewsUntilItBegins: a claim whose transaction has not begun
// keeps its key past its lease; a duplicate finds it in flight.
func TestClaimTxRenewsUntilItBegins(t *testing.T) {
	s := newTestTxStore(t, WithTxLease(time.Second))
	_, _, tx, err := s.BeginClaim(t.Context(), "k", "fp", "first")
	require.NoError(t, err)
	time.Sleep(3 * time.Second)
	requireInFlightAtOnce(t, s.Store, "k")
	require.NoError(t, tx.Commit(t.Context(), nil, time.Hour))
}

// TestClaimTxFailedCommitFreesTheKey: a Commit that fails (its context
// canceled) commits neither the row nor the record, and frees the key.
func TestClaimTxFailedCommitFreesTheKey(t *testing.T) {
	s := newTestTxStore(t)
	txCtx, _, tx, err := s.BeginClaim(t.Context(), "k", "fp", "first")
	require.NoError(t, err)
	q, err := Tx(txCtx)
	require.NoError(t, err)
	_, err = q.ExecContext(txCtx, `INSERT INTO ledger (key, run) VALUES ('k', 'first')`)
	require.NoError(t, err)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, tx.Commit(canceled, nil, time.Hour), context.Canceled)
	require.NoError(t, tx.Rollback(t.Context()), "a Rollback after a failed Commit does nothing")

	assert.Empty(t, ledgerRuns(t, s.db, "k"))
	mustClaim(t, s, "k", "retry", time.Minute)
}

// TestClaimTxKilledProcessLeavesNoWrites: a helper process claims a key,
// writes its row in its transaction and is SIGKILLed before the commit.
// Meanwhile a duplicate finds the key in flight at once. SQLite drops the
// killed transaction: no row is left, and once the lease lapses the retry
// takes the key over and its row is the only one.
func TestClaimTxKilledProcessLeavesNoWrites(t *testing.T) {
	path := testFile(t)
	s := newTestTxStoreOn(t, path)
	helper := spawnHelper(t, path)
	claimed, err := helper.runTx("k", "killed", true)
	require.NoError(t, err)
	require.True(t, claimed)
	requireInFlightAtOnce(t, s.Store, "k")

	helper.kill(t)
	assert.Empty(t, ledgerRuns(t, s.db, "k"), "the killed transaction left no row")
	requireInFlightAtOnce(t, s.Store, "k")
	time.Sleep(2 * helperTxLease)
	claimed, err = runTx(t.Context(), s, "k", "retry", true)
	require.NoError(t, err)
	require.True(t, claimed, "the retry takes the key over once the lease lapsed")
	assert.Equal(t, []string{"retry"}, ledgerRuns(t, s.db, "k"))
}
