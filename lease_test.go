package idempotency_test

import (
	"net/http"
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

func TestExpiredLeaseIsTakenOverAndTheOldOwnerIsRefused(t *testing.T) {
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
			w.WriteHeader(http.StatusCreated)
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

	// A wakes up and finishes: its complete is refused by the store.
	close(unfreeze)
	<-aDone
	require.NotEmpty(t, aErrs.all())
	require.ErrorIs(t, aErrs.all()[len(aErrs.all())-1], store.ErrNotOwner)

	dup := post(workerB, "k", "{}")
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "{}", readAll(t, dup), "B's response, not A's")
	require.EqualValues(t, 1, bRuns.runs.Load())
}
