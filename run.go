package idempotency

import (
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// run runs the handler for a request whose key this process has just
// claimed under owner (the claim was sent at claimedAt), renewing the lease
// while it runs, then records or releases the key:
//   - a panic, a 5xx, or a 408, 409, 425 or 429 releases the key so a
//     retry may run; the panic is re-raised;
//   - so does a request context that ended before the handler returned,
//     unless the handler wrote a 2xx or 3xx status: then its work is done
//     and its client may hold the answer, so it is recorded as below and
//     a retry replays it instead of doing the work again. A handler cut
//     short before it wrote anything gets 503 request-interrupted sent for
//     it, not net/http's empty 200;
//   - a hijacked or flushed response, one over the response limit, one
//     with trailers, or one whose body could not all be written to the
//     client (it hung up, or a timeout handler outside took over) marks the
//     key done but not replayable;
//   - any other response is stored for replay.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, c *call, owner store.Lease, claimedAt time.Time) {
	rec := &c.rec
	rec.Reset(w, m.maxResponseBytes)
	if r.Method == http.MethodHead {
		rec.ForHead()
	}
	lease := &c.lease
	m.leases.keep(lease, r, c.key, owner, claimedAt)
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: the deferred call runs while panicking.
		m.leases.stop(lease)
		m.release(r, c.key, owner)
	}()
	m.next.ServeHTTP(rec, r)
	finished = true
	m.leases.stop(lease)

	switch {
	case rec.Hijacked():
		m.complete(r, c.key, owner, nil)
	case released(r, rec.Status()):
		m.release(r, c.key, owner)
		if rec.Status() == 0 {
			// Cut short before it wrote anything (see released): the
			// request did not complete, and its cookie is not sent either.
			w.Header().Del("Set-Cookie")
			m.writeRetryableProblem(w, problemRequestInterrupted)
		}
	case !rec.Replayable():
		m.complete(r, c.key, owner, nil)
	default:
		c.stored = m.storedResponse(r, rec)
		m.complete(r, c.key, owner, &c.stored)
	}
	rec.Release() // the store has copied what it keeps of the response
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
