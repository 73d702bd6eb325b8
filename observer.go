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
// tracing (package otelidempotency turns it into OpenTelemetry). Any of its
// functions may be nil. They get the request's context (for a lease
// renewal, a copy that outlives its cancellation), so a tracer may find the
// request's span there. Request, Wait and most StoreCall calls come from
// the request's goroutine; lease renewals, and their StoreCall, from
// goroutines of their own, while the handler runs: the functions must be
// safe for concurrent use, return quickly, and keep nothing of ctx.
type Observer struct {
	// Request is told once of every protected request the middleware
	// decides: its outcome, and how long the handler ran; a handler run
	// unprotected (fail-open, or no key) that panics is not told of.
	Request func(ctx context.Context, e RequestEvent)
	// StoreCall is told of every call the middleware makes to the store.
	StoreCall func(ctx context.Context, e StoreEvent)
	// Lease is told of every renewal of a running handler's lease.
	Lease func(ctx context.Context, e LeaseEvent)
	// Wait is told how each wait for an in-flight key ended (WithWait).
	Wait func(ctx context.Context, e WaitEvent)
}

// WithObserver sets the observer told of every outcome, store call, lease
// renewal and wait. No key, scope or body text reaches it unless
// WithObservedKeys is set too. Defaults to none: nothing is observed, and
// nothing measured.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithObservedKeys makes each RequestEvent carry the client's key and the
// request's scope, for an observer that is trusted with them (a trace
// whose readers may see them, say). Defaults to off: they are empty.
func WithObservedKeys() Option {
	return func(c *config) { c.observeKeys = true }
}

// Outcome is what the middleware decided for a request.
type Outcome string

// The outcomes, one for each decided request.
const (
	// OutcomeExecuted: the handler ran under the claimed key, and its
	// response was recorded (for replay, or as done but not replayable).
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran under the claimed key, and the key
	// was freed for a retry: a status the record policy refuses (a 5xx, by
	// default), a panic, DoNotRecord, or a request cut short.
	OutcomeReleased Outcome = "released"
	// OutcomeReplayed: a duplicate got the stored response.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeKeyInFlight: a duplicate got 409 while the key was in flight,
	// at once or at the end of its wait.
	OutcomeKeyInFlight Outcome = "key_in_flight"
	// OutcomeKeyReused: the key was first used with another fingerprint: 422.
	OutcomeKeyReused Outcome = "key_reused"
	// OutcomeNotReplayable: a duplicate of a request whose response could
	// not be stored: 409.
	OutcomeNotReplayable Outcome = "not_replayable"
	// OutcomeStoreUnavailable: the store failed to claim (503), or to
	// commit a transaction after the handler ran (503).
	OutcomeStoreUnavailable Outcome = "store_unavailable"
	// OutcomeFailOpen: the store failed, and the handler ran unprotected
	// (WithFailOpen).
	OutcomeFailOpen Outcome = "fail_open"
	// OutcomeKeyMissing: a request without a key: 400 if the key is
	// required, otherwise passed through to the handler unprotected.
	OutcomeKeyMissing Outcome = "key_missing"
	// OutcomeKeyInvalid: a malformed key, two key headers, or a key the
	// validator refused: 400.
	OutcomeKeyInvalid Outcome = "key_invalid"
	// OutcomeBodyTooLarge: the request body was over the limit: 413.
	OutcomeBodyTooLarge Outcome = "body_too_large"
	// OutcomeRequestInterrupted: the request ended before its key was
	// claimed: its body could not be read (400), or its context ended (503).
	OutcomeRequestInterrupted Outcome = "request_interrupted"
	// OutcomeScopeMissing: no scope, and one is required: 403.
	OutcomeScopeMissing Outcome = "scope_missing"
)

// RequestEvent is one decided request, as Observer.Request gets it.
type RequestEvent struct {
	Outcome Outcome
	// HandlerRan tells whether the handler ran, and Handler how long it
	// ran (until it returned or panicked).
	HandlerRan bool
	Handler    time.Duration
	// Key and Scope are the client's key and the request's scope with
	// WithObservedKeys, otherwise (and where unknown) empty.
	Key, Scope string
}

// StoreOp names a store call.
type StoreOp string

// The store calls: claim (BeginClaim too), renew, complete and release,
// and a transaction's commit and rollback.
const (
	StoreClaim    StoreOp = "claim"
	StoreRenew    StoreOp = "renew"
	StoreComplete StoreOp = "complete"
	StoreRelease  StoreOp = "release"
	StoreCommit   StoreOp = "commit"
	StoreRollback StoreOp = "rollback"
)

// StoreEvent is one store call: its operation, how long it took, and its
// error, nil if it succeeded.
type StoreEvent struct {
	Op       StoreOp
	Duration time.Duration
	Err      error
}

// LeaseResult is how a lease renewal ended.
type LeaseResult string

// The lease renewals' results: renewed; failed (a store error: the next
// renewal tries again); lost (the store says another owner holds the key:
// the handler's outcome will be refused).
const (
	LeaseRenewed LeaseResult = "renewed"
	LeaseFailed  LeaseResult = "failed"
	LeaseLost    LeaseResult = "lost"
)

// LeaseEvent is one lease renewal, and its error unless renewed.
type LeaseEvent struct {
	Result LeaseResult
	Err    error
}

// WaitResult is how a wait for an in-flight key ended.
type WaitResult string

// The waits' ends: answered (the key completed, or turned out reused: a
// replay, 409 or 422), claimed (the key was freed: this request ran),
// timed_out (409), interrupted (the request's context ended: 409) and
// failed (a poll the store failed: 503).
const (
	WaitAnswered    WaitResult = "answered"
	WaitClaimed     WaitResult = "claimed"
	WaitTimedOut    WaitResult = "timed_out"
	WaitInterrupted WaitResult = "interrupted"
	WaitFailed      WaitResult = "failed"
)

// WaitEvent is one wait: how long it lasted, and how it ended.
type WaitEvent struct {
	Duration time.Duration
	Result   WaitResult
}

// decided tells the observer of r's outcome; c is nil for a request
// refused before its body was read.
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

// event returns the observer's event of c's request with outcome; c is
// nil for a request refused before its body was read.
func (m *middleware) event(c *call, outcome Outcome) RequestEvent {
	e := RequestEvent{Outcome: outcome}
	if c != nil && m.observeKeys {
		e.Key, e.Scope = c.clientKey, scopeOf(c.key)
	}
	return e
}

// scopeOf returns the scope that storage key key (storageKey) was made
// of, or "" if key is not yet made.
func scopeOf(key string) string {
	n, size := binary.Uvarint([]byte(key))
	if size <= 0 || uint64(len(key)-size) < n {
		return ""
	}
	return key[size : size+int(n)]
}

// unprotected runs the handler for r without a claim, the request's
// outcome (a key missing, or a store failed open), reading c's buffered
// body; c is nil for a request without a key, whose body is unread.
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

// handlerStart returns the time a handler starts, if the observer needs it.
func (m *middleware) handlerStart() time.Time {
	if m.observer.Request == nil {
		return time.Time{}
	}
	return time.Now()
}

// storeStart returns the time a store call starts, if the observer needs it.
func (m *middleware) storeStart() time.Time {
	if m.observer.StoreCall == nil {
		return time.Time{}
	}
	return time.Now()
}

// storeCalled tells the observer of a store call started at started.
func (m *middleware) storeCalled(ctx context.Context, op StoreOp, started time.Time, err error) {
	if m.observer.StoreCall != nil {
		m.observer.StoreCall(ctx, StoreEvent{Op: op, Duration: time.Since(started), Err: err})
	}
}

// waitEnded tells the observer how c's wait ended, if c waited.
func (m *middleware) waitEnded(r *http.Request, c *call, result WaitResult) {
	if c.waiting && m.observer.Wait != nil {
		m.observer.Wait(r.Context(), WaitEvent{Duration: now() - c.waitStart, Result: result})
	}
}

// sinceEpoch is a time kept in a call as the time since epoch: a third of
// a time.Time's size, on the monotonic clock all the same.
type sinceEpoch = time.Duration

// epoch is the reference of sinceEpoch times.
var epoch = time.Now()

// now is the time since epoch.
func now() sinceEpoch { return time.Since(epoch) }

// renewalDone tells the observer of a renewal of the request's lease: its
// store call, and its result.
func (h *requestLease) renewalDone(ctx context.Context, took time.Duration, err error) {
	m := h.m
	if m.observer.StoreCall != nil {
		m.observer.StoreCall(ctx, StoreEvent{Op: StoreRenew, Duration: took, Err: err})
	}
	if m.observer.Lease == nil {
		return
	}
	result := LeaseRenewed
	switch {
	case errors.Is(err, store.ErrNotOwner):
		result = LeaseLost
	case err != nil:
		result = LeaseFailed
	}
	m.observer.Lease(ctx, LeaseEvent{Result: result, Err: err})
}
