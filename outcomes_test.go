package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

func TestFirstRequestRunsAndDuplicateIsReplayed(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	first := post(mw, "k", `{"amount":100}`)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "session=secret", first.Header.Get("Set-Cookie"), "the first response is untouched")
	require.Equal(t, "1", first.Header.Get("X-Run"))

	for range 3 {
		dup := post(mw, "k", `{"amount":100}`)
		require.Equal(t, http.StatusCreated, dup.StatusCode)
		require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
		require.Equal(t, `{"amount":100}`, readAll(t, dup))
		require.Equal(t, "application/json", dup.Header.Get("Content-Type"))
		require.Equal(t, "/payments/1", dup.Header.Get("Location"))
		require.Empty(t, dup.Header.Values("Set-Cookie"), "cookies are never replayed")
		require.Empty(t, dup.Header.Values("X-Run"), "headers outside the allow-list are not replayed")
	}
	require.EqualValues(t, 1, h.runs.Load())
}

func TestDuplicateInFlightGets409WithRetryAfter(t *testing.T) {
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithRetryAfter(1500 * time.Millisecond))(h)
	done := startFirst(t, mw, h, "k", "{}")
	dup := postWithin(t, 5*time.Second, mw, "k", "{}")
	require.Equal(t, "2", dup.Header.Get("Retry-After"), "1.5 s rounds up to 2")
	requireProblem(t, dup, http.StatusConflict, idempotency.ProblemKeyInFlight)
	close(h.gate)
	<-done
	require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

func TestDifferentRequestWhileInFlightGets422(t *testing.T) {
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New()(h)
	done := startFirst(t, mw, h, "k", `{"amount":1}`)
	requireProblem(t, post(mw, "k", `{"amount":2}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
	close(h.gate)
	<-done
	require.EqualValues(t, 1, h.runs.Load())
}

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

func TestStoreDownFailsClosedWith503(t *testing.T) {
	s := newFlakyStore()
	errs := &errorLog{}
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithStore(s), errs.option())(h)
	s.down.Store(true)
	resp := post(mw, "k", "{}")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	body := readAll(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, body, idempotency.ProblemStoreUnavailable)
	require.NotContains(t, body, "10.0.0.1", "no internal error text in the response")
	require.NotContains(t, body, "refused")
	require.Zero(t, h.runs.Load())
	require.Len(t, errs.all(), 1)
	require.ErrorIs(t, errs.all()[0], errStoreDown)

	s.down.Store(false)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the key is usable once the store is back")
	require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

func TestStoreDownFailOpenRunsUnprotectedAndLogs(t *testing.T) {
	s := newFlakyStore()
	var logs bytes.Buffer
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(),
		idempotency.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))(h)
	s.down.Store(true)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	require.EqualValues(t, 2, h.runs.Load())
	require.Contains(t, logs.String(), "running handler unprotected")
	require.Contains(t, logs.String(), "idempotency: store error")
}

func TestStoreLostBeforeCompleteIsReported(t *testing.T) {
	s := newFlakyStore()
	errs := &errorLog{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.down.Store(true) // the store goes away while the handler runs
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New(idempotency.WithStore(s), errs.option())(h)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the client still gets its response")
	require.Len(t, errs.all(), 1)
	require.ErrorIs(t, errs.all()[0], errStoreDown)
	require.Contains(t, errs.all()[0].Error(), "complete")
}

func TestProblemBodiesAreRFC9457(t *testing.T) {
	mw := idempotency.New(idempotency.WithKeyRequired())(&paymentHandler{})
	resp := post(mw, "", "{}")
	var problem map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&problem))
	require.Equal(t, idempotency.ProblemKeyMissing, problem["type"])
	require.EqualValues(t, http.StatusBadRequest, problem["status"])
	require.NotEmpty(t, problem["title"])
}

// cancellingStore fails every claim as a network store does when the
// request's context is cancelled during the call: the client went away.
type cancellingStore struct {
	store.Store
	cancel context.CancelFunc
}

func (s *cancellingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.cancel()
	return store.Record{}, false, ctx.Err()
}

func TestClientGoneDuringClaimRunsNothingEvenFailOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	errs := &errorLog{}
	h := &paymentHandler{}
	s := &cancellingStore{Store: store.NewMemory(), cancel: cancel}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(), errs.option())(h)
	post(mw, "k", "{}", func(r *http.Request) { *r = *r.WithContext(ctx) })
	require.Zero(t, h.runs.Load(), "an unprotected run would let the client's retry run it again")
	require.Empty(t, errs.all(), "a client going away is not a store error")
}
