package idempotency_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestWaitModeReplaysWhenTheFirstCompletes(t *testing.T) {
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
}

func TestWaitModeTimesOutWith409(t *testing.T) {
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithWait(50 * time.Millisecond))(h)
	done := startFirst(t, mw, h, "k", "{}")
	dup := postWithin(t, 5*time.Second, mw, "k", "{}")
	require.NotEmpty(t, dup.Header.Get("Retry-After"))
	requireProblem(t, dup, http.StatusConflict, idempotency.ProblemKeyInFlight)
	close(h.gate)
	<-done
	require.EqualValues(t, 1, h.runs.Load())
}

func TestWaitModeRunsWhenTheFirstIsReleased(t *testing.T) {
	h := &paymentHandler{delay: 100 * time.Millisecond, status: http.StatusServiceUnavailable}
	mw := idempotency.New(idempotency.WithWait(5 * time.Second))(h)
	done := startFirst(t, mw, h, "k", "{}")
	post(mw, "k", "{}")
	<-done
	require.EqualValues(t, 2, h.runs.Load(), "the waiting duplicate claims the released key and runs")
}
