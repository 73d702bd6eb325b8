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

func TestLeaseIsRenewedWhileTheHandlerRuns(t *testing.T) {
	const lease = time.Second
	h := &paymentHandler{delay: 3 * lease}
	errs := &errorLog{}
	mw := idempotency.New(idempotency.WithLease(lease), errs.option())(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(mw, "k", "{}")
	}()
	require.Eventually(t, func() bool { return h.runs.Load() == 1 }, time.Second, time.Millisecond)
	// Keep sending duplicates for the handler's whole run, well past the
	// first lease: without renewal one of them would take the key over.
	for {
		select {
		case <-done:
			require.EqualValues(t, 1, h.runs.Load())
			require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
			require.Empty(t, errs.all())
			return
		case <-time.After(lease / 5):
			resp := post(mw, "k", "{}")
			if resp.Header.Get("Idempotent-Replayed") == "" {
				require.Equal(t, http.StatusConflict, resp.StatusCode)
			}
		}
	}
}

// TestExpiredLeaseIsTakenOverAndTheOldOwnerIsRefused: a worker cut off
// from the store loses its lease and another takes the key over; when the
// first finishes, its complete (201) or release (500) is refused by the
// store and reported to its error handler, and the new owner's response
// stands.
func TestExpiredLeaseIsTakenOverAndTheOldOwnerIsRefused(t *testing.T) {
	for status, refused := range map[int]string{http.StatusCreated: "complete", http.StatusInternalServerError: "release"} {
		t.Run(refused, func(t *testing.T) {
			const lease = 100 * time.Millisecond
			shared := store.NewMemory()

			// Worker A claims the key, then loses the store (a partition, or a
			// frozen process): it can no longer renew, and its lease lapses.
			cutOff := &flakyStore{Store: shared}
			frozen, unfreeze := make(chan struct{}), make(chan struct{})
			aErrs := &errorLog{}
			workerA := idempotency.New(idempotency.WithStore(cutOff), idempotency.WithLease(lease), aErrs.option())(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					cutOff.down.Store(true)
					close(frozen)
					<-unfreeze
					cutOff.down.Store(false)
					w.WriteHeader(status)
					_, _ = w.Write([]byte("from A"))
				}))
			aDone := make(chan struct{})
			go func() {
				defer close(aDone)
				post(workerA, "k", "{}")
			}()

			<-frozen

			// Worker B gets the retry; once A's lease lapses it takes the key over.
			bRuns := &paymentHandler{}
			workerB := idempotency.New(idempotency.WithStore(shared), idempotency.WithLease(lease))(bRuns)
			require.Eventually(t, func() bool {
				return post(workerB, "k", "{}").StatusCode == http.StatusCreated
			}, 2*time.Second, 10*time.Millisecond)
			require.EqualValues(t, 1, bRuns.runs.Load())

			// A wakes up and finishes: the store refuses its outcome.
			close(unfreeze)
			<-aDone
			require.NotEmpty(t, aErrs.all())
			last := aErrs.all()[len(aErrs.all())-1]
			require.ErrorIs(t, last, store.ErrNotOwner)
			require.ErrorContains(t, last, "idempotency: "+refused)

			dup := post(workerB, "k", "{}")
			require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
			require.Equal(t, "{}", readAll(t, dup), "B's response, not A's")
			require.EqualValues(t, 1, bRuns.runs.Load())
		})
	}
}

// renewFailer fails the first renewals it is asked for, as a store that
// times out for a moment does.
type renewFailer struct {
	store.Store
	failures atomic.Int64
}

func (s *renewFailer) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if s.failures.Add(-1) >= 0 {
		return errStoreDown
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

func TestFailedRenewalIsRetriedBeforeTheLeaseLapses(t *testing.T) {
	const lease = 600 * time.Millisecond
	s := &renewFailer{Store: store.NewMemory()}
	s.failures.Store(3)
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(lease), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	time.Sleep(lease + lease/4) // past the first lease: only a renewal keeps the key
	require.Equal(t, http.StatusConflict, postWithin(t, 5*time.Second, mw, "k", "{}").StatusCode, "the key is still held")
	close(h.gate)
	<-done
	require.EqualValues(t, 1, h.runs.Load())
	require.Len(t, errs.all(), 3, "every failed renewal is reported")
}

// slowRenewer answers Renew only after latency, and gives up without
// renewing if its caller's context ends first, as go-redis and pgx do.
type slowRenewer struct {
	store.Store
	latency time.Duration
}

func (s slowRenewer) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	select {
	case <-time.After(s.latency):
		return s.Store.Renew(ctx, key, owner, lease)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlowStoreStillRenews: a store that takes longer than a third of the
// lease to answer a renewal (but less than the lease) still keeps the key
// held for a handler running several leases, and no renewal is reported
// as failed.
func TestSlowStoreStillRenews(t *testing.T) {
	const lease = 600 * time.Millisecond
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(slowRenewer{Store: store.NewMemory(), latency: 250 * time.Millisecond}),
		idempotency.WithLease(lease), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	defer func() { <-done }()
	defer close(h.gate)
	time.Sleep(3 * lease)
	require.Equal(t, http.StatusConflict, postWithin(t, 5*time.Second, mw, "k", "{}").StatusCode, "the key is still held")
	require.EqualValues(t, 1, h.runs.Load())
	require.Empty(t, errs.all())
}

// hungRenewer lets its first Renew hang, as a call on a connection that
// died without a word does: until it is cancelled if it heeds cancellation
// (as pgx does), or else until its deadline (as go-redis, waiting for a
// reply, heeds only a deadline, or its own ReadTimeout). Later ones work.
type hungRenewer struct {
	store.Store
	heedsCancel bool
	calls       atomic.Int64
}

func (s *hungRenewer) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if s.calls.Add(1) > 1 {
		return s.Store.Renew(ctx, key, owner, lease)
	}
	if s.heedsCancel {
		<-ctx.Done()
		return ctx.Err()
	}
	deadline, _ := ctx.Deadline()
	time.Sleep(time.Until(deadline))
	return context.DeadlineExceeded
}

// TestStuckRenewalDoesNotHoldTheNextBack: while the first renewal hangs
// (from a third of the lease until its own lease is up), the next starts a
// third of the lease after it and keeps the key held past the first lease;
// when the handler then finishes, the hung renewal is cancelled and not
// waited for, and the key is completed at once, whether or not the store
// heeds the cancellation.
func TestStuckRenewalDoesNotHoldTheNextBack(t *testing.T) {
	for name, heedsCancel := range map[string]bool{"store heeds cancellation": true, "store heeds deadlines only": false} {
		t.Run(name, func(t *testing.T) {
			const lease = 1200 * time.Millisecond
			s := &hungRenewer{Store: store.NewMemory(), heedsCancel: heedsCancel}
			h := &paymentHandler{gate: make(chan struct{})}
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(lease), (&errorLog{}).option())(h)
			done := startFirst(t, mw, h, "k", "{}")
			time.Sleep(lease + lease/12)
			require.Equal(t, http.StatusConflict, postWithin(t, 5*time.Second, mw, "k", "{}").StatusCode, "the key is still held")
			close(h.gate) // the hung renewal would give up only at 4/3 of the lease
			select {
			case <-done:
			case <-time.After(lease / 6):
				require.FailNow(t, "the request waited for a hung renewal")
			}
			require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
			require.EqualValues(t, 1, h.runs.Load())
		})
	}
}
