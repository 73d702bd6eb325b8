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

// contextStore is a memory store that honours its contexts as a network
// store does: a call whose context has ended fails with the context's
// error and changes nothing.
type contextStore struct{ store.Store }

func (s contextStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, false, err
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s contextStore) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

func (s contextStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

func (s contextStore) Release(ctx context.Context, key string, owner store.Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, owner)
}

// hangUp returns a request edit that gives the request a context of its
// own, and a handler wrapper that cancels that context before (before is
// true) or after its handler runs, as a client that hangs up then does.
func hangUp(before bool) (func(*http.Request), func(http.Handler) http.Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	edit := func(r *http.Request) { *r = *r.WithContext(ctx) }
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if before {
				cancel()
			}
			next.ServeHTTP(w, r)
			cancel()
		})
	}
	return edit, wrap
}

// TestDisconnectReleasesTheKeyOnAContextHonouringStore: when the client
// hangs up before the handler answers (it writes nothing, or a 5xx), the
// key is released with a context that is not cancelled, so even a store
// that honours contexts frees it and the retry runs the handler again.
func TestDisconnectReleasesTheKeyOnAContextHonouringStore(t *testing.T) {
	for _, status := range []int{0, http.StatusBadGateway} {
		var runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-r.Context().Done() // the client has hung up
				if status != 0 {
					w.WriteHeader(status)
				}
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		errs := &errorLog{}
		mw := idempotency.New(idempotency.WithStore(contextStore{store.NewMemory()}), errs.option())
		edit, hangingUp := hangUp(true)
		post(mw(hangingUp(h)), "k", "{}", edit)
		retry := post(mw(h), "k", "{}")
		require.Equal(t, http.StatusCreated, retry.StatusCode, "status %d: the retry runs, the key is not left in flight", status)
		require.EqualValues(t, 2, runs.Load(), "status %d", status)
		require.Empty(t, errs.all(), "status %d", status)
	}
}

// TestAnswerBeforeDisconnectIsRecordedOnAContextHonouringStore: a handler
// that wrote 201 before its client hung up has done the work; the response
// is recorded with a context that is not cancelled, so even a store that
// honours contexts keeps it, and the retry is replayed, not run again.
func TestAnswerBeforeDisconnectIsRecordedOnAContextHonouringStore(t *testing.T) {
	h := &paymentHandler{}
	errs := &errorLog{}
	mw := idempotency.New(idempotency.WithStore(contextStore{store.NewMemory()}), errs.option())
	edit, hangingUp := hangUp(false)
	first := post(mw(hangingUp(h)), "k", "{}", edit)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	retry := post(mw(h), "k", "{}")
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	require.EqualValues(t, 1, h.runs.Load())
	require.Empty(t, errs.all())
}
