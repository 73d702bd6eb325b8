package idempotency

import (
	"fmt"
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// tryClaimInTx is tryClaim for a store that claims inside a transaction the
// handler joins (store.TxStore).
func (m *middleware) tryClaimInTx(w http.ResponseWriter, r *http.Request, c *call, token string) bool {
	txCtx, rec, tx, err := m.txStore.BeginClaim(r.Context(), c.key, c.fingerprint, token)
	switch {
	case err != nil:
		m.storeFailed(w, r, c, fmt.Errorf("idempotency: claim in transaction: %w", err))
		return true
	case tx != nil:
		m.runInTx(w, r.WithContext(txCtx), tx)
		return true
	default:
		return m.answerFromRecord(w, c, rec)
	}
}

// runInTx runs the handler inside the claim's transaction and holds its
// response back until the outcome is decided:
//   - a panic, a 5xx, a 408, 409, 425 or 429, or a request context that
//     ended before the handler returned (unless it wrote a 2xx or 3xx
//     status, as in run) rolls the transaction back (the handler's writes
//     and the claim together); the response is sent as written, or 503
//     request-interrupted if the handler wrote nothing, and a panic is
//     re-raised;
//   - otherwise the response is stored (or, over the response limit or
//     with trailers, the key marked done but not replayable) and the
//     transaction committed;
//     only then is the response sent. If the commit fails, or does not
//     answer within the record timeout, the client gets 503 instead; a
//     retry with the same key runs the request, or, if the commit did land
//     before its connection was lost, replays it.
func (m *middleware) runInTx(w http.ResponseWriter, r *http.Request, tx store.Tx) {
	held := httpx.NewHeld(w)
	finished := false
	defer func() {
		if !finished { // the handler panicked
			m.rollback(r, tx)
		}
	}()
	m.next.ServeHTTP(held, r)
	finished = true

	status := held.Status()
	if !held.Wrote() {
		status = 0 // as run sees it: 200 only if the request was not cut short
	}
	if released(r, status) {
		m.rollback(r, tx)
		if status == 0 {
			m.writeRetryableProblem(w, problemRequestInterrupted)
			return
		}
		held.Send()
		return
	}
	var resp *store.Response
	if len(held.Body()) <= m.maxResponseBytes && !held.AddsTrailers() {
		stored := m.toStore(r, held.Status(), held.SentHeader().Clone(), held.Body())
		resp = &stored
	}
	ctx, cancel := m.recordContext(r)
	err := tx.Commit(ctx, resp, m.retention)
	cancel()
	if err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: commit: %w", err))
		m.writeRetryableProblem(w, problemCommitFailed)
		return
	}
	held.Send()
}

// rollback abandons the transaction of a request that must not be
// recorded, within the record timeout.
func (m *middleware) rollback(r *http.Request, tx store.Tx) {
	ctx, cancel := m.recordContext(r)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: rollback: %w", err))
	}
}
