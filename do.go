package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// ErrInFlight is returned by Do when another caller holds the key.
var ErrInFlight = errors.New("idempotency: key in flight")

// ErrLeaseLost is wrapped by Do's error when the lease ended while fn ran:
// fn's outcome is not recorded.
var ErrLeaseLost = errors.New("idempotency: lease lost while fn ran")

// ErrKeyReused is returned by Do when the key is held, in flight or done, by
// a call with another fingerprint (DoFingerprint); fn is not run.
var ErrKeyReused = errors.New("idempotency: key reused with another fingerprint")

// ErrKeyExpired is wrapped by Do's error, fn not run, when the key's job
// completed and its record expired: the store keeps only its tombstone.
// The error names when the job completed.
var ErrKeyExpired = errors.New("idempotency: the key's job completed and its record expired")

// ErrNotStored is returned by Do when the key's job ran but the store kept no
// result; fn is not run again.
var ErrNotStored = errors.New("idempotency: the job ran but its result was not stored")

// Do runs fn once per key among all callers sharing s, and returns its
// result. The first caller claims the key under a lease renewed while fn
// runs, and stores the result for the retention; later callers get a copy of
// it. A caller that finds the key in flight gets ErrInFlight, or waits
// (DoWait).
//
// An error from fn releases the key and is returned; one marked Final is
// stored instead. A panic releases the key. fn's context carries the key
// (FromContext); DoNotRecord in it releases the key. With a store.TxStore, fn
// runs in the claim's transaction, and with a store.TxStepStore its steps
// are atomic phases (Step). Do's keys never meet the middleware's. It
// panics if s is nil or a nil pointer.
func Do(ctx context.Context, s store.Store, key string, fn func(ctx context.Context) ([]byte, error), opts ...DoOption) ([]byte, error) {
	if s == nil || isNilPointer(s) {
		panic("idempotency: Do expects a store")
	}
	cfg := defaultDoConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	cfg.storeTimeout = storeTimeout(s, cfg.storeTimeout, cfg.lease, "DoStoreTimeout", "DoLease")
	j := job{cfg: &cfg, store: s, clientKey: key, key: DoStorageKey(cfg.scope, key), token: newToken(), fn: fn}
	if cfg.observer != nil && cfg.observer.Job != nil {
		j.observation = &observation{}
		defer j.observed(ctx) // a panic of fn too
	}
	result, err, done := j.try(ctx)
	switch {
	case done:
		return result, err
	case cfg.wait == 0:
		j.decided(OutcomeKeyInFlight)
		return nil, ErrInFlight
	}
	return j.wait(ctx)
}

// The statuses of Do's stored result and final error.
const (
	doResultStatus = http.StatusOK
	doFinalStatus  = http.StatusInternalServerError
)

type job struct {
	cfg          *doConfig
	store        store.Store
	clientKey    string
	key          string // storage key
	token        string
	fn           func(ctx context.Context) ([]byte, error)
	*observation // nil: no observer
}

// try claims the key and runs fn, or answers from the record; done is false
// when the key is in flight.
func (j *job) try(ctx context.Context) (result []byte, err error, done bool) {
	if ts, ok := j.store.(store.TxStore); ok {
		return j.tryInTx(ctx, ts)
	}
	claimedAt := time.Now()
	claimCtx, deadline := withStoreDeadline(ctx, j.cfg.storeTimeout)
	rec, claimed, err := j.store.Claim(claimCtx, j.key, j.cfg.fingerprint, j.token, j.cfg.lease)
	deadline.end()
	switch {
	case err != nil:
		j.decided(OutcomeStoreUnavailable)
		return nil, fmt.Errorf("idempotency: claim: %w", err), true
	case claimed:
		result, err = j.run(ctx, rec, claimedAt)
		return result, err, true
	default:
		return j.stored(rec)
	}
}

func (j *job) tryInTx(ctx context.Context, ts store.TxStore) (result []byte, err error, done bool) {
	claimCtx, deadline := withStoreDeadline(ctx, j.cfg.storeTimeout)
	txCtx, rec, tx, err := ts.BeginClaim(claimCtx, j.key, j.cfg.fingerprint, j.token)
	tx, err = deadline.keepTx(tx, err)
	switch {
	case err != nil:
		j.decided(OutcomeStoreUnavailable)
		return nil, fmt.Errorf("idempotency: claim in transaction: %w", err), true
	case tx != nil:
		result, err = j.runInTx(ctx, txCtx, rec, tx)
		return result, err, true
	default:
		return j.stored(rec)
	}
}

// wait waits for the key as WithWait does; ErrInFlight if the wait or ctx
// ends first.
func (j *job) wait(ctx context.Context) ([]byte, error) {
	var result []byte
	var err error
	try := func() (done bool) { result, err, done = j.try(ctx); return done }
	end := waitPolls.poll(ctx, j.cfg.wait, j.store, j.cfg.storeTimeout, j.key, try)
	if end != polledDone {
		j.decided(OutcomeKeyInFlight)
	}
	switch end {
	case polledDone:
		return result, err
	case polledInterrupted:
		return nil, fmt.Errorf("%w: %w", ErrInFlight, context.Cause(ctx))
	default:
		return nil, ErrInFlight
	}
}

// stored returns the outcome kept in rec; done is false if in flight.
func (j *job) stored(rec store.Record) (result []byte, err error, done bool) {
	rec, openErr := opened(j.cfg.sealer, j.key, rec)
	switch {
	case rec.Fingerprint != j.cfg.fingerprint:
		j.decided(OutcomeKeyReused)
		return nil, ErrKeyReused, true
	case rec.State == store.StateInFlight:
		return nil, nil, false
	case rec.State == store.StateExpired:
		j.decided(OutcomeKeyExpired)
		return nil, fmt.Errorf("%w: it completed at %s", ErrKeyExpired, rec.Completed.UTC().Format(time.RFC3339)), true
	case openErr != nil:
		j.decided(OutcomeRecordSealed)
		return nil, fmt.Errorf("%w: %w", ErrRecordSealed, openErr), true
	case rec.State == store.StateCompleted && rec.Response != nil:
		j.decided(OutcomeReplayed)
		if rec.Response.Status == doFinalStatus {
			return nil, Final(errors.New(string(rec.Response.Body))), true
		}
		return bytes.Clone(rec.Response.Body), nil, true // the caller's own, not the store's
	default:
		j.decided(OutcomeNotReplayable)
		return nil, ErrNotStored, true
	}
}

// outcome returns the response recording fn's outcome, or nil to release the
// key.
func outcome(ctx *callContext, result []byte, err error) *store.Response {
	switch {
	case ctx.doNotRecord.Load(), err != nil && !IsFinal(err):
		return nil
	case err != nil:
		return &store.Response{Status: doFinalStatus, Body: []byte(err.Error())}
	default:
		return &store.Response{Status: doResultStatus, Body: result}
	}
}

// recordContext is detached from ctx and ends at the record timeout.
func (j *job) recordContext(ctx context.Context) *detachedDeadline {
	return newDetachedDeadline(ctx, cmp.Or(j.cfg.recordTimeout, j.cfg.lease))
}

// Final marks err, returned by Do's fn, as final: Do stores it, and later
// callers get an error with its message (IsFinal) instead of running fn.
// Final(nil) is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err: err}
}

// IsFinal reports whether err wraps an error marked by Final.
func IsFinal(err error) bool {
	var final *finalError
	return errors.As(err, &final)
}

type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }

func (e *finalError) Unwrap() error { return e.err }
