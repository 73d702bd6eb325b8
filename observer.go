package idempotency

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// Observer receives what the middleware decides and does, for metrics and
// tracing (see otelidempotency). Any function may be nil. Each gets the
// request's context (detached for a renewal); renewals call from their own
// goroutines, so the functions must be concurrency-safe, quick, and keep
// nothing of ctx.
type Observer struct {
	// Request is told once of each decided protected request, but not of an
	// unprotected handler that panics.
	Request func(ctx context.Context, e RequestEvent)
	// StoreCall is told of every store call.
	StoreCall func(ctx context.Context, e StoreEvent)
	// Lease is told of every lease renewal.
	Lease func(ctx context.Context, e LeaseEvent)
	// Wait is told how each wait for an in-flight key ended.
	Wait func(ctx context.Context, e WaitEvent)
	// Job is told of each call of Do given the observer (DoObserver).
	Job func(ctx context.Context, e JobEvent)
}

// WithObserver sets the observer. No key or scope reaches it without
// WithObservedKeys. Defaults to none.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithObservedKeys makes each RequestEvent carry the client's key and scope.
// Defaults to off: they are empty.
func WithObservedKeys() Option {
	return func(c *config) { c.observeKeys = true }
}

// Outcome is what the middleware decided for a request, or Do for a call
// (JobEvent lists the outcomes of Do).
type Outcome string

const (
	// OutcomeExecuted: the handler ran and its response was recorded.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran and the key was released (policy,
	// panic, DoNotRecord, or the request cut short).
	OutcomeReleased Outcome = "released"
	// OutcomeReplayed: the stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeKeyInFlight: 409, at once or after a wait.
	OutcomeKeyInFlight Outcome = "key_in_flight"
	// OutcomeKeyReused: 422.
	OutcomeKeyReused Outcome = "key_reused"
	// OutcomeKeyExpired: 422, only the key's tombstone is left.
	OutcomeKeyExpired Outcome = "key_expired"
	// OutcomeNotReplayable: 409, the response was not stored.
	OutcomeNotReplayable Outcome = "not_replayable"
	// OutcomeRecordSealed: 503, the stored response does not open
	// (WithSealer); the request did not run.
	OutcomeRecordSealed Outcome = "record_sealed"
	// OutcomeStoreUnavailable: 503, a claim or commit failed.
	OutcomeStoreUnavailable Outcome = "store_unavailable"
	// OutcomeFailOpen: the handler ran unprotected (WithFailOpen).
	OutcomeFailOpen Outcome = "fail_open"
	// OutcomeKeyMissing: 400 if the key is required, else run unprotected.
	OutcomeKeyMissing Outcome = "key_missing"
	// OutcomeKeyInvalid: 400.
	OutcomeKeyInvalid Outcome = "key_invalid"
	// OutcomeBodyTooLarge: 413.
	OutcomeBodyTooLarge Outcome = "body_too_large"
	// OutcomeRequestInterrupted: the request ended before its claim (400 or
	// 503).
	OutcomeRequestInterrupted Outcome = "request_interrupted"
	// OutcomeScopeMissing: 403.
	OutcomeScopeMissing Outcome = "scope_missing"
)

// RequestEvent is one decided request.
type RequestEvent struct {
	Outcome Outcome
	// Handler is how long the handler ran, if HandlerRan.
	HandlerRan bool
	Handler    time.Duration
	// Key and Scope are set only with WithObservedKeys.
	Key, Scope string
}

// StoreOp names a store call; a claim includes BeginClaim.
type StoreOp string

const (
	StoreClaim    StoreOp = "claim"
	StoreRenew    StoreOp = "renew"
	StoreComplete StoreOp = "complete"
	StoreRelease  StoreOp = "release"
	StoreCommit   StoreOp = "commit"
	StoreRollback StoreOp = "rollback"
)

// StoreEvent is one store call; Err is nil on success.
type StoreEvent struct {
	Op       StoreOp
	Duration time.Duration
	Err      error
}

// LeaseResult is how a lease renewal ended: failed is retried at the next
// renewal; lost means another owner holds the key.
type LeaseResult string

const (
	LeaseRenewed LeaseResult = "renewed"
	LeaseFailed  LeaseResult = "failed"
	LeaseLost    LeaseResult = "lost"
)

// LeaseEvent is one lease renewal.
type LeaseEvent struct {
	Result LeaseResult
	Err    error
}

// WaitResult is how a wait for an in-flight key ended: answered (a replay,
// 409 or 422), claimed (this request ran), timed_out and interrupted (409),
// or failed (503).
type WaitResult string

const (
	WaitAnswered    WaitResult = "answered"
	WaitClaimed     WaitResult = "claimed"
	WaitTimedOut    WaitResult = "timed_out"
	WaitInterrupted WaitResult = "interrupted"
	WaitFailed      WaitResult = "failed"
)

// WaitEvent is one wait.
type WaitEvent struct {
	Duration time.Duration
	Result   WaitResult
}

// decided tells the observer of r's outcome; c is nil for a request refused
// before its body was read.
func (m *middleware) decided(r *http.Request, c *call, outcome Outcome) {
	if m.observer.Request == nil {
		return
	}
	e := m.event(c, outcome)
	if c != nil {
		e.HandlerRan, e.Handler = c.handlerRan, c.handlerTime
	}
	m.observer.Request(r.Context(), e)
}

func (m *middleware) event(c *call, outcome Outcome) RequestEvent {
	e := RequestEvent{Outcome: outcome}
	if c != nil && m.observeKeys {
		e.Key, e.Scope = c.clientKey, scopeOf(c.key)
	}
	return e
}

// scopeOf returns the scope of storage key key, or "" if unset.
func scopeOf(key string) string {
	n, size := binary.Uvarint([]byte(key))
	if size <= 0 || uint64(len(key)-size) < n {
		return ""
	}
	return key[size : size+int(n)]
}

// unprotected runs the handler without a claim; c is nil for a request
// without a key, whose body is unread.
func (m *middleware) unprotected(w http.ResponseWriter, r *http.Request, c *call, outcome Outcome) {
	if c != nil && r.Body != http.NoBody {
		r.Body = newBufferedBody(c.body)
	}
	started := m.handlerStart()
	m.next.ServeHTTP(w, r)
	if m.observer.Request != nil {
		e := m.event(c, outcome)
		e.HandlerRan, e.Handler = true, time.Since(started)
		m.observer.Request(r.Context(), e)
	}
}

func (m *middleware) handlerStart() time.Time {
	if m.observer.Request == nil {
		return time.Time{}
	}
	return time.Now()
}

func (m *middleware) storeStart() time.Time {
	if m.observer.StoreCall == nil {
		return time.Time{}
	}
	return time.Now()
}

func (m *middleware) storeCalled(ctx context.Context, op StoreOp, started time.Time, err error) {
	if m.observer.StoreCall != nil {
		m.observer.StoreCall(ctx, StoreEvent{Op: op, Duration: time.Since(started), Err: err})
	}
}

func (m *middleware) waitEnded(r *http.Request, c *call, result WaitResult) {
	if c.waiting && m.observer.Wait != nil {
		m.observer.Wait(r.Context(), WaitEvent{Duration: now() - c.waitStart, Result: result})
	}
}

// sinceEpoch is a monotonic time a third of a time.Time's size.
type sinceEpoch = time.Duration

var epoch = time.Now()

func now() sinceEpoch { return time.Since(epoch) }

func (h *requestLease) renewalDone(ctx context.Context, took time.Duration, err error) {
	m := h.m
	if m.observer.StoreCall != nil {
		m.observer.StoreCall(ctx, StoreEvent{Op: StoreRenew, Duration: took, Err: err})
	}
	if m.observer.Lease != nil {
		m.observer.Lease(ctx, LeaseEvent{Result: leaseResult(err), Err: err})
	}
}

// leaseResult is the result of a renewal that returned err.
func leaseResult(err error) LeaseResult {
	switch {
	case errors.Is(err, store.ErrNotOwner):
		return LeaseLost
	case err != nil:
		return LeaseFailed
	}
	return LeaseRenewed
}
