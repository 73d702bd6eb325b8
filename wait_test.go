package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// pollFailingStore answers the first claims of a key as the memory store
// does, and fails every later one as failPoll says: the polls of a
// request waiting on the key.
type pollFailingStore struct {
	store.Store
	claims   atomic.Int64
	answered int64 // claims answered before the polls begin to fail
	failPoll func(ctx context.Context) error
}

func (s *pollFailingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if s.claims.Add(1) > s.answered {
		return store.Record{}, false, s.failPoll(ctx)
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

// TestWaitPollErrorNeverFailsOpen: a waiting duplicate has seen its key in
// flight; when a poll then fails, running the handler unprotected would run
// it a second time while the first may still be running, so even with
// fail-open the duplicate gets 503 and the error handler is told.
func TestWaitPollErrorNeverFailsOpen(t *testing.T) {
	s := &pollFailingStore{Store: store.NewMemory(), answered: 2, // the first request's claim and the duplicate's
		failPoll: func(context.Context) error { return errStoreDown }}
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
	s := &pollFailingStore{Store: store.NewMemory(), answered: 2,
		failPoll: func(ctx context.Context) error {
			<-ctx.Done() // a store that answers only when the caller gives up
			return ctx.Err()
		}}
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
