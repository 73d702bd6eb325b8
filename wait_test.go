package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestWaitPollErrorNeverFailsOpen: a waiting duplicate has seen its key in
// flight; when a poll then fails, running the handler unprotected would run
// it a second time while the first may still be running, so even with
// fail-open the duplicate gets 503 and the error handler is told.
func TestWaitPollErrorNeverFailsOpen(t *testing.T) {
	s := &claimFailingStore{Store: store.NewMemory(), answered: 2, // the first request's claim and the duplicate's
		fail: func(context.Context) error { return errStoreDown }}
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(),
		idempotency.WithWait(5*time.Second), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	defer func() { <-done }()
	defer close(h.gate)
	requireProblem(t, postWithin(t, 5*time.Second, mw, "k", "{}"),
		http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable)
	require.EqualValues(t, 1, h.runs.Load(), "the handler ran again while the first request ran")
	require.Len(t, errs.all(), 1)
	require.ErrorIs(t, errs.all()[0], errStoreDown)
}

// TestWaitEndedDuringAPoll: a waiter whose own deadline passes while a poll
// is at the store ends its wait as when it passes between polls: 409
// key-in-flight, and its deadline is not reported as a store error.
func TestWaitEndedDuringAPoll(t *testing.T) {
	s := &claimFailingStore{Store: store.NewMemory(), answered: 2, fail: stall}
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(5*time.Second), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	requireProblem(t, post(withDeadline(200*time.Millisecond, mw), "k", "{}"),
		http.StatusConflict, idempotency.ProblemKeyInFlight)
	require.Empty(t, errs.all())
	close(h.gate)
	<-done
	require.EqualValues(t, 1, h.runs.Load())
}
