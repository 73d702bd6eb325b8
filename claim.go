package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// claim claims c's key and runs the handler, or answers from the record
// holding it (replay cache or store): a replay, a 422, a 409 or a wait.
func (m *middleware) claim(w http.ResponseWriter, r *http.Request, c *call) {
	if rec, ok := m.cache.get(c.key); ok && m.answerFromRecord(w, r, c, rec) {
		return
	}
	token := c.token
	if m.tryClaim(w, r, c, token) {
		return
	}
	if m.wait > 0 {
		m.waitForRecord(w, r, c, token)
		return
	}
	m.writeRetryableProblem(w, r, problemKeyInFlight)
	m.decided(r, c, OutcomeKeyInFlight)
}

// tryClaim makes one attempt at c's key: it runs the handler if it claims
// it, or answers from the record holding it. It reports false, having
// written nothing, when the key is in flight for the same request.
func (m *middleware) tryClaim(w http.ResponseWriter, r *http.Request, c *call, token string) bool {
	if m.txStore != nil {
		return m.tryClaimInTx(w, r, c, token)
	}
	claimedAt := time.Now()
	ctx, deadline := withStoreDeadline(r.Context(), m.storeTimeout)
	rec, claimed, err := m.store.Claim(ctx, c.key, c.fingerprint, token, m.lease)
	deadline.end()
	if claimed && err == nil {
		m.run(w, r, c, rec, claimedAt) // serve reports the claim
		return true
	}
	m.storeCalled(r.Context(), StoreClaim, claimedAt, err)
	if err != nil {
		m.storeFailed(w, r, c, fmt.Errorf("idempotency: claim: %w", err))
		return true
	}
	return m.answerFromStore(w, r, c, rec, claimedAt.Sub(epoch))
}

// tryClaimInTx is tryClaim for a store.TxStore.
func (m *middleware) tryClaimInTx(w http.ResponseWriter, r *http.Request, c *call, token string) bool {
	claimedAt, sent := m.storeStart(), m.cache.now()
	ctx, deadline := withStoreDeadline(r.Context(), m.storeTimeout)
	txCtx, rec, tx, err := m.txStore.BeginClaim(ctx, c.key, c.fingerprint, token)
	tx, err = deadline.keepTx(tx, err)
	if tx != nil && err == nil {
		cc, hr := newClaimedCall(r, txCtx, c)
		cc.fence = rec.Owner.Fence
		m.runInTx(w, hr, cc, tx, rec, claimedAt) // reports the claim
		return true
	}
	m.storeCalled(r.Context(), StoreClaim, claimedAt, err)
	if err != nil {
		m.storeFailed(w, r, c, fmt.Errorf("idempotency: claim in transaction: %w", err))
		return true
	}
	return m.answerFromStore(w, r, c, rec, sent)
}

// answerFromRecord answers from rec, unless rec is in flight for the same
// request, and reports whether it answered.
func (m *middleware) answerFromRecord(w http.ResponseWriter, r *http.Request, c *call, rec store.Record) bool {
	var outcome Outcome
	switch {
	case rec.Fingerprint != c.fingerprint:
		m.writeProblem(w, r, problemKeyReused)
		outcome = OutcomeKeyReused
	case rec.State == store.StateCompleted && rec.Response != nil:
		m.replay(w, rec.Response)
		outcome = OutcomeReplayed
	case rec.State == store.StateExpired:
		m.writeProblem(w, r, keyExpired(rec.Completed))
		outcome = OutcomeKeyExpired
	case rec.State == store.StateCompleted, rec.State == store.StateUnreplayable:
		// A completed record without a response (a faulty store) is
		// never run again.
		m.writeProblem(w, r, problemNotReplayable)
		outcome = OutcomeNotReplayable
	default:
		return false
	}
	m.waitEnded(r, c, WaitAnswered)
	m.decided(r, c, outcome)
	return true
}

// storeFailed answers a request whose claim the store could not decide:
// 503, or with fail-open, the handler runs unprotected. It never runs
// unprotected once the request's context has ended (the client's retry
// would run it again; it gets 503 request-interrupted, and a hang-up is
// not reported as a store error), nor while waiting, as the first request
// may still run; a waiter whose context ended gets 409.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, c *call, err error) {
	ended := r.Context().Err()
	switch {
	case ended != nil && c.waiting:
		m.waitEnded(r, c, WaitInterrupted)
		m.writeRetryableProblem(w, r, problemKeyInFlight)
		m.decided(r, c, OutcomeKeyInFlight)
		return
	case ended != nil:
		if !errors.Is(ended, context.Canceled) {
			m.storeError(r, c, err)
		}
		m.writeRetryableProblem(w, r, problemRequestInterrupted)
		m.decided(r, c, OutcomeRequestInterrupted)
		return
	}
	m.storeError(r, c, err)
	if m.failOpen && !c.waiting {
		m.logger.WarnContext(r.Context(), "idempotency: store unavailable, running handler unprotected",
			"method", r.Method, "path", r.URL.Path)
		m.unprotected(w, r, c, OutcomeFailOpen)
		return
	}
	m.waitEnded(r, c, WaitFailed)
	m.writeRetryableProblem(w, r, problemStoreUnavailable)
	m.decided(r, c, OutcomeStoreUnavailable)
}
