package idempotency

import (
	"cmp"
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// run runs the handler, with the steps the claim returned, under the key
// just claimed, renewing the lease meanwhile, then records or releases the
// key (see releases). A panic releases it and is re-raised; a handler cut
// short before writing gets 503 request-interrupted, not net/http's empty
// 200. A hijacked, flushed, oversized, trailered, short or partly sent
// response is marked done but not replayable; any other is stored for
// replay.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, claimed *call, claim store.Record, claimedAt time.Time) {
	c, r := newClaimedCall(r, r.Context(), claimed)
	rec := &c.rec
	rec.Reset(w, m.maxResponseBytes)
	if r.Method == http.MethodHead {
		rec.ForHead()
	}
	owner := claim.Owner
	c.fence = owner.Fence
	if m.stepStore != nil {
		c.handler.ctx.steps.start(m.stepStore, owner, claim.Steps, cmp.Or(m.recordTimeout, m.lease), rec)
	}
	lease := &c.lease
	c.holder = requestLease{m: m, r: r, c: &c.call}
	m.leases.keep(lease, &c.holder, m.store, c.key, owner, claimedAt)
	decided := false
	defer func() {
		if decided {
			return
		}
		// The handler, the record policy or the observer panicked.
		m.leases.stop(lease)
		m.release(r, c, owner)
		m.decided(r, &c.call, OutcomeReleased)
	}()
	m.serve(rec, r, &c.call, claimedAt)
	c.handler.ctx.steps.end()
	ended := r.Context().Err() != nil
	release := m.releases(r, c, rec.Status(), ended, rec.Hijacked())
	decided = true
	m.leases.stop(lease)

	switch {
	case release:
		m.release(r, c, owner)
		if rec.Status() == 0 && ended && !rec.Hijacked() {
			// Cut short before writing: the cookie of a request that did
			// not complete is not sent.
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

// runInTx runs the handler inside the claim's transaction and holds its
// response back until the outcome is decided. Where run would release, the
// transaction (handler writes and claim together) is rolled back and the
// response sent as written. Otherwise the response is stored and the
// transaction committed, and only then sent; a failed commit gets 503,
// and a retry runs again or, if the commit landed, replays. With a
// store.TxStepStore, the first step commits the claim, whose lease is
// renewed from then on (see startInTx).
func (m *middleware) runInTx(w http.ResponseWriter, r *http.Request, c *claimedCall, tx store.Tx, claim store.Record, claimedAt time.Time) {
	held := httpx.NewHeld(w)
	renewing := false
	stopRenewing := func() {
		if renewing {
			renewing = false
			m.leases.stop(&c.lease)
		}
	}
	if ts, ok := m.txStore.(store.TxStepStore); ok {
		c.handler.ctx.steps.startInTx(ts, tx, claim.Owner, claim.Steps, m.lease, cmp.Or(m.recordTimeout, m.lease), heldStatus{held},
			func() {
				c.holder = requestLease{m: m, r: r, c: &c.call}
				m.leases.keep(&c.lease, &c.holder, m.store, c.key, claim.Owner, time.Now())
				renewing = true
			})
	}
	decided := false
	defer func() {
		if !decided { // the handler, the record policy or the observer panicked
			stopRenewing()
			m.rollback(r, c, tx)
			m.decided(r, &c.call, OutcomeReleased)
		}
	}()
	m.serve(held, r, &c.call, claimedAt)
	c.handler.ctx.steps.end()
	stopRenewing()
	status := held.Status()
	if !held.Wrote() {
		status = 0 // as run sees it
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
	err := tx.Commit(ctx, sealed(m.sealer, c.key, resp), m.retention)
	m.storeCalled(ctx, StoreCommit, committedAt, err)
	ctx.stop()
	if err != nil {
		m.storeError(r, &c.call, fmt.Errorf("idempotency: commit: %w", err))
		m.writeRetryableProblem(w, r, problemCommitFailed)
		m.decided(r, &c.call, OutcomeStoreUnavailable)
		return
	}
	m.cache.put(c.key, m.cache.completed(&c.call, resp), sent, m.retention)
	held.Send()
	m.decided(r, &c.call, OutcomeExecuted)
}

// heldStatus is a held response's status as steps see it: 0 until written.
type heldStatus struct{ held *httpx.Held }

func (h heldStatus) Status() int {
	if !h.held.Wrote() {
		return 0
	}
	return h.held.Status()
}

// serve reports the won claim to the observer, then runs the handler,
// noting in c that it ran and for how long, even on a panic. Callers must
// already release the key on a panic, the observer's included.
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

func outcomeOf(released bool) Outcome {
	if released {
		return OutcomeReleased
	}
	return OutcomeExecuted
}
