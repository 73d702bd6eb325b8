package idempotency_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// leaseLosingStore is a memory store on which every renewal finds the
// lease taken over: Renew returns store.ErrNotOwner. It counts the calls.
type leaseLosingStore struct {
	store.Store
	renews atomic.Int64
}

func (s *leaseLosingStore) Renew(context.Context, string, store.Lease, time.Duration) error {
	s.renews.Add(1)
	return store.ErrNotOwner
}

// TestLostLeaseIsReportedOnceAndNoLongerRenewed: when the store says the
// lease was lost, the keeper stops renewing it and tells the error handler
// once, with an error wrapping store.ErrNotOwner, although the handler
// runs on for several more leases.
func TestLostLeaseIsReportedOnceAndNoLongerRenewed(t *testing.T) {
	const lease = 60 * time.Millisecond
	s := &leaseLosingStore{Store: store.NewMemory()}
	reported := make(chan struct{})
	var mu sync.Mutex
	var errs []error
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(lease),
		idempotency.WithErrorHandler(func(_ *http.Request, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			if len(errs) == 1 {
				close(reported)
			}
		}))

	var renewsWhileRunning int64
	var errsWhileRunning []error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-reported:
		case <-time.After(5 * time.Second):
		}
		// Run on for several more leases: a keeper still renewing would
		// try again at every wake-up (a twelfth of the lease).
		time.Sleep(3 * lease)
		mu.Lock()
		renewsWhileRunning, errsWhileRunning = s.renews.Load(), append([]error(nil), errs...)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	post(mw(h), "k", "{}")

	require.Len(t, errsWhileRunning, 1, "the lost lease is reported once")
	require.ErrorIs(t, errsWhileRunning[0], store.ErrNotOwner)
	require.EqualValues(t, 1, renewsWhileRunning, "a lost lease is not renewed again")
}
