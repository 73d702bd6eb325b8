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

// ErrInFlight is returned by Do when another caller holds the key and its
// result has not been stored (DoWait: within the wait).
var ErrInFlight = errors.New("idempotency: key in flight")

// ErrLeaseLost is wrapped by the error Do returns when its lease ended, and
// was perhaps taken over, while fn ran: fn's outcome is not recorded.
var ErrLeaseLost = errors.New("idempotency: lease lost while fn ran")

// ErrNotStored is returned by Do when the key's job ran but the store did
// not keep its result (a memory store over its byte cap, say): fn is not
// run again.
var ErrNotStored = errors.New("idempotency: the job ran but its result was not stored")

// Do runs fn once per key among all the callers, in every process, that
// share s, and returns its result. The first caller claims the key under a
// lease, renewed while fn runs, and stores fn's result for the retention;
// a later caller gets a copy of the stored result, its own, without
// running fn. A caller that finds the key in flight gets ErrInFlight, or
// waits (DoWait).
//
// fn returning an error releases the key, so the job may run again, and
// Do returns the error; an error marked with Final is stored instead, and
// later callers get one with the same message. A panic releases the key
// and goes on. fn's context carries the key (FromContext: its fence, and
// Derive for downstream keys); a DoNotRecord in it releases the key. With
// a store.TxStore, fn runs inside the claim's transaction (pgstore.Tx) and
// its writes commit with the result. Do's keys never meet the middleware's
// in the same store. It panics if s is nil or a nil pointer.
func Do(ctx context.Context, s store.Store, key string, fn func(ctx context.Context) ([]byte, error), opts ...DoOption) ([]byte, error) {
	if s == nil || isNilPointer(s) {
		panic("idempotency: Do expects a store")
	}
	cfg := defaultDoConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	cfg.storeTimeout = storeTimeout(s, cfg.storeTimeout, cfg.lease, "DoStoreTimeout", "DoLease")
	j := job{cfg: &cfg, store: s, clientKey: key, key: doStorageKey(key), token: newToken(), fn: fn}
	result, err, done := j.try(ctx)
	switch {
	case done:
		return result, err
	case cfg.wait == 0:
		return nil, ErrInFlight
	}
	return j.wait(ctx)
}

// doStorageKey is the key Do's records are stored under: an empty method,
// which no request the middleware protects has (WithMethods refuses it),
// and the route "idempotency.Do".
func doStorageKey(key string) string {
	return storageKey("", "", "idempotency.Do", key)
}

// doFingerprint is the fingerprint of every claim Do makes: a job's key
// alone names its work.
const doFingerprint = "idempotency.Do"

// The statuses Do stores its outcomes under: fn's result, or the message
// of its final error.
const (
	doResultStatus = http.StatusOK
	doFinalStatus  = http.StatusInternalServerError
)

// job is one call of Do.
type job struct {
	cfg       *doConfig
	store     store.Store
	clientKey string
	key       string // storage key
	token     string
	fn        func(ctx context.Context) ([]byte, error)
}

// try makes one attempt at the key: it runs fn if it claims it, or
// answers from the record that holds it. done is false, with nothing
// else returned, when the key is in flight.
func (j *job) try(ctx context.Context) (result []byte, err error, done bool) {
	if ts, ok := j.store.(store.TxStore); ok {
		return j.tryInTx(ctx, ts)
	}
	claimedAt := time.Now()
	claimCtx, deadline := withStoreDeadline(ctx, j.cfg.storeTimeout)
	rec, claimed, err := j.store.Claim(claimCtx, j.key, doFingerprint, j.token, j.cfg.lease)
	deadline.end()
	switch {
	case err != nil:
		return nil, fmt.Errorf("idempotency: claim: %w", err), true
	case claimed:
		result, err = j.run(ctx, rec.Owner, claimedAt)
		return result, err, true
	default:
		return stored(rec)
	}
}

// tryInTx is try for a store that claims inside a transaction fn joins.
func (j *job) tryInTx(ctx context.Context, ts store.TxStore) (result []byte, err error, done bool) {
	claimCtx, deadline := withStoreDeadline(ctx, j.cfg.storeTimeout)
	txCtx, rec, tx, err := ts.BeginClaim(claimCtx, j.key, doFingerprint, j.token)
	tx, err = deadline.keepTx(tx, err)
	switch {
	case err != nil:
		return nil, fmt.Errorf("idempotency: claim in transaction: %w", err), true
	case tx != nil:
		result, err = j.runInTx(ctx, txCtx, rec.Owner, tx)
		return result, err, true
	default:
		return stored(rec)
	}
}

// wait waits for the key, as a request waiting with WithWait does (woken
// by a store.Watcher, else polling), until its result is stored, or it is
// free and this caller runs fn, or the wait or ctx ends (ErrInFlight).
func (j *job) wait(ctx context.Context) ([]byte, error) {
	var result []byte
	var err error
	try := func() (done bool) { result, err, done = j.try(ctx); return done }
	switch waitPolls.poll(ctx, j.cfg.wait, j.store, j.cfg.storeTimeout, j.key, try) {
	case polledDone:
		return result, err
	case polledInterrupted:
		return nil, fmt.Errorf("%w: %w", ErrInFlight, context.Cause(ctx))
	default:
		return nil, ErrInFlight
	}
}

// stored returns the outcome kept in rec, a record this caller did not
// claim; done is false if rec is in flight.
func stored(rec store.Record) (result []byte, err error, done bool) {
	switch {
	case rec.State == store.StateInFlight:
		return nil, nil, false
	case rec.State == store.StateCompleted && rec.Response != nil:
		if rec.Response.Status == doFinalStatus {
			return nil, Final(errors.New(string(rec.Response.Body))), true
		}
		return bytes.Clone(rec.Response.Body), nil, true // the caller's own, not the store's
	default:
		return nil, ErrNotStored, true
	}
}

// outcome returns the response that records fn's result and error, or nil
// if its key is released instead: an error not marked final, or a
// DoNotRecord in fn.
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

// recordContext is the context of a store call that records fn's outcome:
// detached from ctx's cancellation, and ending after the record timeout.
// The caller must call stop when the call returns.
func (j *job) recordContext(ctx context.Context) *detachedDeadline {
	return newDetachedDeadline(ctx, cmp.Or(j.cfg.recordTimeout, j.cfg.lease))
}

// Final marks err, returned by Do's fn, as final: Do stores it, and later
// callers of the key get an error with its message (IsFinal reports true
// of it) instead of running fn again. It returns nil if err is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err: err}
}

// IsFinal reports whether err, or an error it wraps, was marked by Final,
// as the error Do returns for a stored final error is.
func IsFinal(err error) bool {
	var final *finalError
	return errors.As(err, &final)
}

// finalError is an error marked by Final.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }

func (e *finalError) Unwrap() error { return e.err }
