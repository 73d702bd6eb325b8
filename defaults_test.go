package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// durationStore is a memory store that records the lease of every Claim
// and the retention of every Complete.
type durationStore struct {
	store.Store
	mu         sync.Mutex
	leases     []time.Duration
	retentions []time.Duration
}

func (s *durationStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	s.leases = append(s.leases, lease)
	s.mu.Unlock()
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *durationStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	s.mu.Lock()
	s.retentions = append(s.retentions, retention)
	s.mu.Unlock()
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

// TestDefaultLeaseAndRetention: without options a claim holds its key for
// a 30 second lease, and a completed record is kept for 24 hours.
func TestDefaultLeaseAndRetention(t *testing.T) {
	s := &durationStore{Store: store.NewMemory()}
	mw := idempotency.New(idempotency.WithStore(s))(&paymentHandler{})
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []time.Duration{30 * time.Second}, s.leases)
	require.Equal(t, []time.Duration{24 * time.Hour}, s.retentions)
}

// TestDefaultBodyLimitIsOneMiB: without options a request body of exactly
// 1 MiB is read and handed on whole, and one byte more gets 413 without
// running the handler.
func TestDefaultBodyLimitIsOneMiB(t *testing.T) {
	var runs int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		_, _ = w.Write([]byte(strconv.Itoa(len(body))))
	})
	mw := idempotency.New()(h)
	atLimit := post(mw, "a", strings.Repeat("x", 1<<20))
	require.Equal(t, http.StatusOK, atLimit.StatusCode)
	require.Equal(t, strconv.Itoa(1<<20), readAll(t, atLimit))

	requireProblem(t, post(mw, "b", strings.Repeat("x", 1<<20+1)),
		http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.Equal(t, 1, runs)
}

// TestDefaultResponseLimitIsOneMiB: without options a response body of
// exactly 1 MiB is stored and replayed; one byte more still reaches the
// client in full, but its key is done but not replayable: the duplicate
// gets 409 not-replayable and the handler does not run again.
func TestDefaultResponseLimitIsOneMiB(t *testing.T) {
	for _, size := range []int{1 << 20, 1<<20 + 1} {
		var runs int
		body := strings.Repeat("y", size)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, body)
		})
		mw := idempotency.New()(h)
		first := post(mw, "k", "{}")
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, size, len(readAll(t, first)), "size %d: the client gets the whole body", size)

		dup := post(mw, "k", "{}")
		if size <= 1<<20 {
			require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"), "size %d", size)
			require.Equal(t, size, len(readAll(t, dup)), "size %d", size)
		} else {
			requireProblem(t, dup, http.StatusConflict, idempotency.ProblemNotReplayable)
		}
		require.Equal(t, 1, runs, "size %d", size)
	}
}

// TestWithStoreRefusesANilStore: a nil store, or a nil pointer to one,
// panics when the option is made rather than at the first request.
func TestWithStoreRefusesANilStore(t *testing.T) {
	require.Panics(t, func() { idempotency.WithStore(nil) })
	var never *store.Memory
	require.Panics(t, func() { idempotency.WithStore(never) })
	require.NotPanics(t, func() { idempotency.WithStore(store.NewMemory()) })
}
