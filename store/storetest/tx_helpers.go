package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// openTx is a transaction a won BeginClaim opened; a cleanup rolls it back
// if the test stops before ending it.
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

// commit commits the transaction, requiring no error.
func (o *openTx) commit(t *testing.T, resp *store.Response, retention time.Duration) {
	t.Helper()
	o.ended = true
	require.NoError(t, o.tx.Commit(t.Context(), resp, retention), "Commit of the transaction holding the key")
}

// rollback rolls the transaction back, requiring no error.
func (o *openTx) rollback(t *testing.T) {
	t.Helper()
	o.ended = true
	require.NoError(t, o.tx.Rollback(t.Context()), "Rollback of the transaction holding the key")
}

// atOnce fails the test if call has not returned within holdOff; call runs
// in a goroutine of its own, so that one that never returns fails too.
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

// beginClaim calls s.BeginClaim at once with a fresh token, requiring no
// error; tx is nil when the claim lost.
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

// mustBeginClaim requires a BeginClaim of key, free or expired, to win.
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

// mustBeginLose requires a BeginClaim of key, which is live, to lose, and
// returns the record.
func mustBeginLose(t *testing.T, s store.TxStore, key, fingerprint string) store.Record {
	t.Helper()
	_, rec, tx := beginClaim(t, s, key, fingerprint)
	require.Nil(t, tx, "BeginClaim(%q) on a live key must not win; got %+v", key, rec)
	require.Empty(t, rec.Owner.Token, "a lost BeginClaim must not reveal the owner's token")
	return rec
}

// claimAtOnce calls s.Claim at once with a fresh token, requiring no error.
func claimAtOnce(t *testing.T, s store.Store, key, fingerprint string) (rec store.Record, claimed bool) {
	t.Helper()
	var err error
	atOnce(t, fmt.Sprintf("Claim(%q)", key), func() {
		rec, claimed, err = s.Claim(t.Context(), key, fingerprint, newToken(), longLease)
	})
	require.NoError(t, err, "Claim(%q)", key)
	return rec, claimed
}

// requireHeldByTx requires key, which an open transaction holds, to be in
// flight at once for BeginClaim and Claim, with either fingerprint. The
// fingerprint reported is not checked: the holder's record may not be
// readable before it commits.
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

// requireHeldRecord requires what op, a lost claim, reports of a key an
// open transaction holds: its TTL may be zero.
func requireHeldRecord(t *testing.T, rec store.Record, op string) {
	t.Helper()
	require.Equal(t, store.StateInFlight, rec.State, "%s of a key an open transaction holds", op)
	require.Nil(t, rec.Response, "an in-flight record has no response")
	require.GreaterOrEqual(t, rec.TTL, time.Duration(0), "time left")
	require.LessOrEqual(t, rec.TTL, longLease, "time left")
}

// requireFinished requires Claim and BeginClaim to report key finished,
// claimed with fingerprint, with want (nil: unreplayable).
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

// beginClaimWhenFree calls BeginClaim on key until it wins, within
// holdOff, requiring key to stay in flight until then.
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
