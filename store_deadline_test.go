package idempotency_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// storeTimeout is the store timeout of TestStoreTimeout's middlewares.
const storeTimeout = 100 * time.Millisecond

// TestStoreTimeout: a claim or look that a store never answers gets 503
// store-unavailable with Retry-After within the store timeout (the bound
// checked is the timeout + 1 s), as does Do's claim; what outlives its
// call (a transaction, a watch) is not cut off by the deadline.
func TestStoreTimeout(t *testing.T) {
	unavailable := func(t *testing.T, mw http.Handler, key string) {
		t.Helper()
		sent := time.Now()
		resp := postWithin(t, storeTimeout+time.Second, mw, key, "{}")
		assert.GreaterOrEqual(t, time.Since(sent), storeTimeout, "answered at the deadline, not before")
		requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	}
	options := func(s store.Store, more ...idempotency.Option) []idempotency.Option {
		return append([]idempotency.Option{idempotency.WithStore(s), idempotency.WithStoreTimeout(storeTimeout),
			idempotency.WithErrorHandler(func(*http.Request, error) {})}, more...)
	}

	t.Run("a claim", func(t *testing.T) {
		h := &paymentHandler{}
		unavailable(t, idempotency.New(options(&claimFailingStore{Store: store.NewMemory(), fail: stall})...)(h), "k")
		assert.Zero(t, h.runs.Load())
	})

	t.Run("a claim in a transaction", func(t *testing.T) {
		h := &paymentHandler{}
		unavailable(t, idempotency.New(options(&stalledTxStore{txMemory: &txMemory{Memory: store.NewMemory()}})...)(h), "k")
		assert.Zero(t, h.runs.Load())
	})

	t.Run("a waiting request's look", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		s := &claimFailingStore{Store: store.NewMemory(), answered: 2, fail: stall} // the first request's, the duplicate's first
		mw := idempotency.New(options(s, idempotency.WithWait(10*time.Second))...)(h)
		first := startFirst(t, mw, h, "k", "{}")
		unavailable(t, mw, "k")
		close(h.gate)
		<-first
		assert.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("a transaction outlives its claim's deadline", func(t *testing.T) {
		var ended error
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(3 * storeTimeout)
			ended = r.Context().Err()
			w.WriteHeader(http.StatusCreated)
		})
		s := &txMemory{Memory: store.NewMemory()}
		resp := post(idempotency.New(options(s)...)(h), "k", "{}")
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.NoError(t, ended, "the handler's context, which carries the transaction")
	})

	t.Run("a watch's start", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		s := &stalledWatcher{Memory: store.NewMemory(), deadlines: make(chan time.Duration, 100)}
		mw := idempotency.New(options(s, idempotency.WithWait(10*time.Second))...)(h)
		first := startFirst(t, mw, h, "k", "{}")
		time.AfterFunc(3*storeTimeout, func() { close(h.gate) })
		resp := postWithin(t, 3*time.Second, mw, "k", "{}")
		<-first
		assert.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "the wait went on, polling")
		assert.LessOrEqual(t, <-s.deadlines, storeTimeout, "the first watch's deadline")
	})

	t.Run("Do's claim", func(t *testing.T) {
		ran := false
		sent := time.Now()
		_, err := idempotency.Do(context.Background(), &claimFailingStore{Store: store.NewMemory(), fail: stall}, "job",
			func(context.Context) ([]byte, error) { ran = true; return nil, nil }, idempotency.DoStoreTimeout(storeTimeout))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(sent), storeTimeout+time.Second)
		assert.False(t, ran)
	})
}

// stalledTxStore is a store.TxStore whose BeginClaim never answers.
type stalledTxStore struct{ *txMemory }

func (s *stalledTxStore) BeginClaim(ctx context.Context, _, _, _ string) (context.Context, store.Record, store.Tx, error) {
	return ctx, store.Record{}, nil, stall(ctx)
}

// stalledWatcher is a memory store whose Watch never answers. It sends
// the time left to each Watch's deadline on deadlines.
type stalledWatcher struct {
	*store.Memory
	deadlines chan time.Duration
}

func (s *stalledWatcher) Watch(ctx context.Context, _ string) (<-chan struct{}, func(), error) {
	deadline, _ := ctx.Deadline()
	s.deadlines <- time.Until(deadline)
	return nil, nil, stall(ctx)
}
