package idempotency_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// silentStore claims as the memory store does, then never answers a call
// that records an outcome until its caller gives up, as a store cut off
// after the claim does.
type silentStore struct{ store.Store }

func (silentStore) Complete(ctx context.Context, _ string, _ store.Lease, _ *store.Response, _ time.Duration) error {
	return stall(ctx)
}

func (silentStore) Release(ctx context.Context, _ string, _ store.Lease) error { return stall(ctx) }

// silentTxStore is silentStore for a store that claims in a transaction:
// Commit and Rollback never answer.
type silentTxStore struct{ *txMemory }

func (s silentTxStore) BeginClaim(ctx context.Context, key, fp, token string) (context.Context, store.Record, store.Tx, error) {
	txCtx, rec, tx, err := s.txMemory.BeginClaim(ctx, key, fp, token)
	if tx != nil {
		tx = silentTx{}
	}
	return txCtx, rec, tx, err
}

type silentTx struct{}

func (silentTx) Commit(ctx context.Context, _ *store.Response, _ time.Duration) error {
	return stall(ctx)
}

func (silentTx) Rollback(ctx context.Context) error { return stall(ctx) }

// TestWithRecordTimeout: a store call that records the outcome and gets
// no answer gives up after the record timeout, or by default after the
// lease: the request returns, the error handler is told of the deadline,
// and a transactional request whose commit timed out gets 503.
func TestWithRecordTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name       string
		store      store.Store
		opt        idempotency.Option
		status     int // the handler's
		call       string
		wantStatus int // the client's
	}{
		{"complete, by default within the lease", silentStore{store.NewMemory()}, idempotency.WithLease(timeout),
			http.StatusCreated, "complete", http.StatusCreated},
		{"release", silentStore{store.NewMemory()}, idempotency.WithRecordTimeout(timeout),
			http.StatusInternalServerError, "release", http.StatusInternalServerError},
		{"commit", silentTxStore{&txMemory{Memory: store.NewMemory()}}, idempotency.WithRecordTimeout(timeout),
			http.StatusCreated, "commit", http.StatusServiceUnavailable},
		{"rollback", silentTxStore{&txMemory{Memory: store.NewMemory()}}, idempotency.WithRecordTimeout(timeout),
			http.StatusInternalServerError, "rollback", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log errorLog
			mw := idempotency.New(idempotency.WithStore(tc.store), tc.opt, log.option())(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) }))

			resp := postWithin(t, 50*timeout, mw, "k", "{}")
			require.Equal(t, tc.wantStatus, resp.StatusCode)
			if tc.wantStatus == http.StatusServiceUnavailable {
				requireProblem(t, resp, tc.wantStatus, idempotency.ProblemStoreUnavailable)
			}
			errs := log.all()
			require.Len(t, errs, 1)
			require.ErrorIs(t, errs[0], context.DeadlineExceeded)
			require.True(t, strings.HasPrefix(errs[0].Error(), "idempotency: "+tc.call+": "), "reported: %v", errs[0])
		})
	}

	t.Run("refuses a timeout that is not positive", func(t *testing.T) {
		for _, d := range []time.Duration{0, -time.Second} {
			require.PanicsWithValue(t, "idempotency: WithRecordTimeout expects d > 0", func() { idempotency.WithRecordTimeout(d) })
		}
	})
}
