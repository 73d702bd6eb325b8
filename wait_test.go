package idempotency_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestWaitMode: with WithWait, a duplicate of a request in flight waits for
// its outcome.
func TestWaitMode(t *testing.T) {
	t.Run("replays when the first completes", func(t *testing.T) {
		h := &paymentHandler{delay: 200 * time.Millisecond}
		mw := idempotency.New(idempotency.WithWait(5 * time.Second))(h)
		var wg sync.WaitGroup
		responses := make([]*http.Response, 5)
		wg.Go(func() { responses[0] = post(mw, "k", `{"n":1}`) })
		require.Eventually(t, func() bool { return h.runs.Load() == 1 }, time.Second, time.Millisecond)
		for i := 1; i < len(responses); i++ {
			wg.Go(func() { responses[i] = post(mw, "k", `{"n":1}`) })
		}
		wg.Wait()
		require.Empty(t, responses[0].Header.Get("Idempotent-Replayed"))
		for _, resp := range responses[1:] {
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, `{"n":1}`, readAll(t, resp))
		}
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("times out with 409", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := idempotency.New(idempotency.WithWait(50 * time.Millisecond))(h)
		done := startFirst(t, mw, h, "k", "{}")
		dup := postWithin(t, 5*time.Second, mw, "k", "{}")
		require.NotEmpty(t, dup.Header.Get("Retry-After"))
		requireProblem(t, dup, http.StatusConflict, idempotency.ProblemKeyInFlight)
		close(h.gate)
		<-done
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("runs when the first is released", func(t *testing.T) {
		h := &paymentHandler{delay: 100 * time.Millisecond, status: http.StatusServiceUnavailable}
		mw := idempotency.New(idempotency.WithWait(5 * time.Second))(h)
		done := startFirst(t, mw, h, "k", "{}")
		post(mw, "k", "{}")
		<-done
		require.EqualValues(t, 2, h.runs.Load(), "the waiting duplicate claims the released key and runs")
	})

	// TestDeadlineWhileWaiting: a duplicate waiting (WithWait) for an
	// in-flight key whose own deadline passes gets 409, as when the wait times
	// out, not an empty 200.
	t.Run("deadline while waiting gets 409", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := withDeadline(200*time.Millisecond, idempotency.New(idempotency.WithWait(5*time.Second))(h))
		done := startFirst(t, mw, h, "k", "{}")
		requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemKeyInFlight)
		close(h.gate)
		<-done
	})
}

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
