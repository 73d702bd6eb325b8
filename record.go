package idempotency

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// releases reports whether the response the handler wrote for c's
// request r, with status (0: nothing written), frees the key for a retry
// rather than being recorded. ended tells whether r's context had ended
// when the handler returned: the work is then judged unfinished unless it
// wrote a 2xx or 3xx, whatever the record policy says. A hijacked
// connection is recorded, and the policy is not asked about it. A handler
// that called DoNotRecord is always released.
func (m *middleware) releases(r *http.Request, c *claimedCall, status int, ended, hijacked bool) bool {
	switch {
	case c.handler.ctx.doNotRecord.Load():
		return true
	case hijacked:
		return false
	case ended && (status < 200 || status >= 400):
		return true
	}
	return !m.record(r, cmp.Or(status, http.StatusOK))
}

// DefaultRecordPolicy is the record policy unless WithRecordPolicy sets
// another: it records every status but a 5xx and the 4xx a retry may cure
// (408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many
// Requests), whose keys are released. A policy of one's own may call it
// for the statuses it leaves alone.
func DefaultRecordPolicy(_ *http.Request, status int) bool {
	switch {
	case status >= 500:
		return false
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	default:
		return true
	}
}

// storedResponse is the replayable part of what the handler wrote for r:
// status, allow-listed headers and body.
func (m *middleware) storedResponse(r *http.Request, rec *httpx.Recorder) store.Response {
	status, header := rec.Status(), rec.SentHeader()
	if status == 0 {
		// Nothing written: net/http sends 200 with the header map as it
		// is, which toStore must not filter in place.
		status, header = http.StatusOK, header.Clone()
	}
	return m.toStore(r, status, header, rec.Body())
}

// complete records c's finished request: resp for replay, or nil for done
// but not replayable, and keeps the record in the replay cache once the
// store has it. It runs even if the client has gone away, within the
// record timeout, and is sent again on connection errors (see resend).
func (m *middleware) complete(r *http.Request, c *claimedCall, owner store.Lease, resp *store.Response) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started, sent := m.storeStart(), m.cache.now()
	err := resend(ctx, func(ctx context.Context) error {
		return m.store.Complete(ctx, c.key, owner, resp, m.retention)
	})
	m.storeCalled(ctx, StoreComplete, started, err)
	if err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: complete: %w", err))
		return
	}
	m.cache.put(c.key, m.cache.completed(&c.call, resp), sent, m.retention)
}

// release frees c's claim, if still ours, so a retry may run. A release
// the store refuses with store.ErrNotOwner (the lease was lost, and the key
// perhaps taken over, while the handler ran) is reported, as a refused
// complete is: the handler may have run beside another (or, right after a
// connection error, a first try took effect). Like complete, it runs
// within the record timeout even if the client has gone away, and is sent
// again on connection errors.
func (m *middleware) release(r *http.Request, c *claimedCall, owner store.Lease) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started := m.storeStart()
	err := resend(ctx, func(ctx context.Context) error { return m.store.Release(ctx, c.key, owner) })
	m.storeCalled(ctx, StoreRelease, started, err)
	if err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: release: %w", err))
	}
}

// rollback abandons the transaction of c's request, which must not be
// recorded, within the record timeout.
func (m *middleware) rollback(r *http.Request, c *claimedCall, tx store.Tx) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started := m.storeStart()
	err := tx.Rollback(ctx)
	m.storeCalled(ctx, StoreRollback, started, err)
	if err != nil {
		m.errorHandler(r, fmt.Errorf("idempotency: rollback: %w", err))
	}
}

// recordContext returns the context of a store call that records the
// outcome of r, c's request (complete, release, commit, rollback):
// detached from r's cancellation, and ending after the record timeout
// (WithRecordTimeout, else the lease), so that a store that stops
// answering holds the request no longer than that. The caller must call
// stop when the call returns. The first is c's own, allocated with it; any
// later one is new, since a store may still hold an earlier one.
func (m *middleware) recordContext(r *http.Request, c *claimedCall) *detachedDeadline {
	timeout := cmp.Or(m.recordTimeout, m.lease)
	if c.recordUsed {
		return newDetachedDeadline(r.Context(), timeout)
	}
	c.recordUsed = true
	c.record.init(r.Context(), timeout)
	return &c.record
}
