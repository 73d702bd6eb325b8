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

// renewClock is a memory store that notes when each Claim and Renew
// arrives.
type renewClock struct {
	store.Store
	mu      sync.Mutex
	claimed time.Time
	renews  []time.Duration // after the claim
}

func (s *renewClock) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	s.claimed = time.Now()
	s.mu.Unlock()
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *renewClock) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	s.mu.Lock()
	s.renews = append(s.renews, time.Since(s.claimed))
	s.mu.Unlock()
	return s.Store.Renew(ctx, key, owner, lease)
}

// TestLeaseIsRenewedEveryThirdOfIt: a running handler's lease is renewed
// about a third of the lease after the claim, and again about a third
// after each renewal, so that two more renewals could fail before it
// lapses. The bounds leave room for a slow machine: never before a quarter
// of the lease, and the first by three quarters of it.
func TestLeaseIsRenewedEveryThirdOfIt(t *testing.T) {
	const lease = 1500 * time.Millisecond
	s := &renewClock{Store: store.NewMemory()}
	h := &paymentHandler{delay: lease + lease/4}
	post(idempotency.New(idempotency.WithStore(s), idempotency.WithLease(lease))(h), "k", "{}")

	s.mu.Lock()
	defer s.mu.Unlock()
	require.GreaterOrEqual(t, len(s.renews), 2, "renewals at %v", s.renews)
	require.Less(t, s.renews[0], 3*lease/4, "the first renewal, at %v", s.renews)
	previous := time.Duration(0)
	for _, at := range s.renews {
		require.GreaterOrEqual(t, at-previous, lease/4, "renewals at %v", s.renews)
		previous = at
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
