package idempotency

import (
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// run runs the handler for r, whose key this process has just claimed
// under owner (the claim was sent at claimedAt), with r's call, claimed,
// moved into a claimedCall of its own and in the handler's context
// (FromContext), renewing the lease while it runs, then records or
// releases the key:
//   - a panic of the handler or of the record policy releases the key so a
//     retry may run; the panic is re-raised;
//   - so does a request context that ended before the handler returned,
//     unless the handler wrote a 2xx or 3xx status: then its work is done
//     and its client may hold the answer, so it is recorded as below and
//     a retry replays it instead of doing the work again. A handler cut
//     short before it wrote anything gets 503 request-interrupted sent for
//     it, not net/http's empty 200;
//   - so does a handler's DoNotRecord, and a status the record policy
//     refuses (by default a 5xx, or a 408, 409, 425 or 429);
//   - a hijacked or flushed response, one over the response limit, one
//     with trailers, one whose body is short of its Content-Length, or one
//     whose body could not all be written to the client (it hung up, or a
//     timeout handler outside took over) marks the key done but not
//     replayable;
//   - any other response is stored for replay.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, claimed *call, owner store.Lease, claimedAt time.Time) {
	c, r := newClaimedCall(r, r.Context(), claimed)
	rec := &c.rec
	rec.Reset(w, m.maxResponseBytes)
	if r.Method == http.MethodHead {
		rec.ForHead()
	}
	c.fence = owner.Fence
	lease := &c.lease
	c.holder = requestLease{m: m, r: r}
	m.leases.keep(lease, &c.holder, m.store, c.key, owner, claimedAt)
	decided := false
	defer func() {
		if decided {
			return
		}
		// The handler, the record policy or the observer panicked: the
		// deferred call runs while panicking.
		m.leases.stop(lease)
		m.release(r, c, owner)
		m.decided(r, &c.call, OutcomeReleased)
	}()
	m.serve(rec, r, &c.call, claimedAt)
	ended := r.Context().Err() != nil
	release := m.releases(r, c, rec.Status(), ended, rec.Hijacked())
	decided = true
	m.leases.stop(lease)

	switch {
	case release:
		m.release(r, c, owner)
		if rec.Status() == 0 && ended && !rec.Hijacked() {
			// Cut short before it wrote anything (see releases): the
			// request did not complete, and its cookie is not sent either.
			w.Header().Del("Set-Cookie")
			m.writeRetryableProblem(w, r, problemRequestInterrupted)
		}
	case rec.Hijacked(), !rec.Replayable():
		m.complete(r, c, owner, nil)
	default:
		c.stored = m.storedResponse(r, rec)
		m.complete(r, c, owner, &c.stored)
	}
	rec.Release() // the store has copied what it keeps of the response
	m.decided(r, &c.call, outcomeOf(release))
}

// runInTx runs the handler inside the claim's transaction, with c in its
// context (FromContext), and holds its response back until the outcome is
// decided:
//   - a panic of the handler or of the record policy, a request context
//     that ended before the handler returned (unless it wrote a 2xx or 3xx
//     status, as in run), a handler's DoNotRecord, or a status the record
//     policy refuses rolls the transaction back (the handler's writes and
//     the claim together); the response is sent as written, or 503
//     request-interrupted if the context ended before the handler wrote
//     anything, and a panic is re-raised;
//   - otherwise the response is stored (or, over the response limit,
//     with trailers, or with a body short of its Content-Length, the key
//     marked done but not replayable) and the transaction committed;
//     only then is the response sent. If the commit fails, or does not
//     answer within the record timeout, the client gets 503 instead; a
//     retry with the same key runs the request, or, if the commit did land
//     before its connection was lost, replays it.
func (m *middleware) runInTx(w http.ResponseWriter, r *http.Request, c *claimedCall, tx store.Tx, claimedAt time.Time) {
	held := httpx.NewHeld(w)
	decided := false
	defer func() {
		if !decided { // the handler, the record policy or the observer panicked
			m.rollback(r, c, tx)
			m.decided(r, &c.call, OutcomeReleased)
		}
	}()
	m.serve(held, r, &c.call, claimedAt)
	status := held.Status()
	if !held.Wrote() {
		status = 0 // as run sees it: 200 only if the request was not cut short
	}
	ended := r.Context().Err() != nil
	release := m.releases(r, c, status, ended, false)
	decided = true

	if release {
		m.rollback(r, c, tx)
		if status == 0 && ended {
			m.writeRetryableProblem(w, r, problemRequestInterrupted)
		} else {
			held.Send()
		}
		m.decided(r, &c.call, OutcomeReleased)
		return
	}
	var resp *store.Response
	if len(held.Body()) <= m.maxResponseBytes && !held.AddsTrailers() && !held.ShortOfLength(r.Method) {
		stored := m.toStore(r, held.Status(), held.SentHeader().Clone(), held.Body())
		resp = &stored
	}
	ctx := m.recordContext(r, c)
	committedAt, sent := m.storeStart(), m.cache.now()
	err := tx.Commit(ctx, resp, m.retention)
	m.storeCalled(ctx, StoreCommit, committedAt, err)
	ctx.stop()
	if err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: commit: %w", err))
		m.writeRetryableProblem(w, r, problemCommitFailed)
		m.decided(r, &c.call, OutcomeStoreUnavailable)
		return
	}
	m.cache.put(c.key, m.cache.completed(&c.call, resp), sent, m.retention)
	held.Send()
	m.decided(r, &c.call, OutcomeExecuted)
}

// serve tells the observer of the claim that r's call c won (sent at
// claimedAt), then runs the handler with w, noting in c that it ran and,
// if the observer needs it, for how long, whether it returns or panics.
// run and runInTx call it once they will release the key if anything
// panics, the observer included.
func (m *middleware) serve(w http.ResponseWriter, r *http.Request, c *call, claimedAt time.Time) {
	m.storeCalled(r.Context(), StoreClaim, claimedAt, nil)
	m.waitEnded(r, c, WaitClaimed)
	started := m.handlerStart()
	defer func() {
		c.handlerRan = true
		if !started.IsZero() {
			c.handlerTime = time.Since(started)
		}
	}()
	m.next.ServeHTTP(w, r)
}

// outcomeOf is the outcome of a request whose handler ran under its
// claim, released or recorded.
func outcomeOf(released bool) Outcome {
	if released {
		return OutcomeReleased
	}
	return OutcomeExecuted
}
