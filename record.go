package idempotency

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// releases reports whether the handler's response (status 0: nothing
// written) frees the key for a retry rather than being recorded: always
// after DoNotRecord; never for a hijacked connection; when r's context had
// ended, unless it wrote a 2xx or 3xx (its client may hold the answer);
// else as the record policy says.
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
// (408, 409, 425, 429), whose keys are released. A policy of one's own
// may call it for the statuses it leaves alone.
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

// storedResponse is the replayable part of what the handler wrote.
func (m *middleware) storedResponse(r *http.Request, rec *httpx.Recorder) store.Response {
	status, header := rec.Status(), rec.SentHeader()
	if status == 0 {
		// Nothing written: net/http still sends this header map, which
		// toStore must not filter in place.
		status, header = http.StatusOK, header.Clone()
	}
	return m.toStore(r, status, header, rec.Body())
}

// complete records c's outcome: resp for replay, or nil for done but not
// replayable. It runs even if the client has gone away, within the record
// timeout, and is resent on connection errors.
func (m *middleware) complete(r *http.Request, c *claimedCall, owner store.Lease, resp *store.Response) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started, sent := m.storeStart(), m.cache.now()
	stored := sealed(m.sealer, c.key, resp)
	err := resend(ctx, func(ctx context.Context) error {
		return m.store.Complete(ctx, c.key, owner, stored, m.retention)
	})
	m.storeCalled(ctx, StoreComplete, started, err)
	if err != nil {
		m.storeError(r, &c.call, fmt.Errorf("idempotency: complete: %w", err))
		return
	}
	m.cache.put(c.key, m.cache.completed(&c.call, resp), sent, m.retention)
}

// release frees c's claim, if still ours, so a retry may run; like
// complete it outlives the client and is resent. store.ErrNotOwner is
// reported: the lease was lost while the handler ran, which may have run
// beside another.
func (m *middleware) release(r *http.Request, c *claimedCall, owner store.Lease) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started := m.storeStart()
	err := resend(ctx, func(ctx context.Context) error { return m.store.Release(ctx, c.key, owner) })
	m.storeCalled(ctx, StoreRelease, started, err)
	if err != nil {
		m.storeError(r, &c.call, fmt.Errorf("idempotency: release: %w", err))
	}
}

// rollback abandons c's transaction within the record timeout.
func (m *middleware) rollback(r *http.Request, c *claimedCall, tx store.Tx) {
	ctx := m.recordContext(r, c)
	defer ctx.stop()
	started := m.storeStart()
	err := tx.Rollback(ctx)
	m.storeCalled(ctx, StoreRollback, started, err)
	if err != nil {
		m.storeError(r, &c.call, fmt.Errorf("idempotency: rollback: %w", err))
	}
}

// recordContext returns the context of a store call that records c's
// outcome: detached from r's cancellation, ending after the record
// timeout. The caller must call stop. Only the first reuses c's; a store
// may still hold an earlier one.
func (m *middleware) recordContext(r *http.Request, c *claimedCall) *detachedDeadline {
	timeout := cmp.Or(m.recordTimeout, m.lease)
	if c.recordUsed {
		return newDetachedDeadline(r.Context(), timeout)
	}
	c.recordUsed = true
	c.record.init(r.Context(), timeout)
	return &c.record
}
