package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// droppingStore is a memory store whose first drops Complete and Release
// calls meet a dropped connection and fail with err: before reaching the
// store, or after it (landed: the call took effect and its reply was
// lost). It counts every Complete and Release sent.
type droppingStore struct {
	store.Store
	err    error
	landed bool
	drops  atomic.Int64
	sent   atomic.Int64
}

func (s *droppingStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	return s.send(func() error { return s.Store.Complete(ctx, key, owner, resp, retention) })
}

func (s *droppingStore) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.send(func() error { return s.Store.Release(ctx, key, owner) })
}

func (s *droppingStore) send(call func() error) error {
	s.sent.Add(1)
	if s.drops.Add(-1) < 0 {
		return call()
	}
	if s.landed {
		_ = call()
	}
	return s.err
}

var (
	// errRefused is a call to a primary that has died: never sent.
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	// errReplyLost is a call whose connection closed before its reply.
	errReplyLost = fmt.Errorf("redis: read: %w", io.EOF)
)

// TestOutcomeCallsAreSentAgain: a Complete or Release that fails with a
// connection error is sent again within the record timeout, whether or
// not its first try reached the store. The key then replays (or, released,
// runs again at once), the handler ran once, and nothing is reported.
func TestOutcomeCallsAreSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		landed bool
		status int
	}{
		{"complete refused", errRefused, false, http.StatusCreated},
		{"complete reply lost", errReplyLost, true, http.StatusCreated},
		{"release refused", errRefused, false, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &droppingStore{Store: store.NewMemory(), err: tc.err, landed: tc.landed}
			s.drops.Store(1)
			errs := &errorLog{}
			h := &paymentHandler{status: tc.status}
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(time.Minute), errs.option())(h)

			require.Equal(t, tc.status, post(mw, "k", "{}").StatusCode)
			require.EqualValues(t, 2, s.sent.Load(), "the outcome call, sent twice")
			require.Empty(t, errs.all())
			dup := post(mw, "k", "{}")
			require.Equal(t, tc.status, dup.StatusCode, "not 409: the key is not left in flight")
			if tc.status == http.StatusCreated {
				require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
				require.EqualValues(t, 1, h.runs.Load())
			} else {
				require.EqualValues(t, 2, h.runs.Load(), "released, the key runs again")
			}
		})
	}
}

// TestOutcomeCallsStopResending: a call is sent again only after a
// connection error, and only within the record timeout.
func TestOutcomeCallsStopResending(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		sent func(n int64) bool
	}{
		{"store error", errStoreDown, func(n int64) bool { return n == 1 }},
		{"not owner", store.ErrNotOwner, func(n int64) bool { return n == 1 }},
		{"connection error until the timeout", errRefused, func(n int64) bool { return n > 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &droppingStore{Store: store.NewMemory(), err: tc.err}
			s.drops.Store(1 << 30)
			errs := &errorLog{}
			const timeout = 300 * time.Millisecond
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithRecordTimeout(timeout), errs.option())(&paymentHandler{})

			started := time.Now()
			require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
			require.Less(t, time.Since(started), timeout+time.Second, "bounded by the record timeout")
			require.True(t, tc.sent(s.sent.Load()), "sent %d times", s.sent.Load())
			require.Len(t, errs.all(), 1)
			require.ErrorIs(t, errs.all()[0], tc.err)
		})
	}
}

// TestDoOutcomeCallsAreSentAgain: Do's Complete, failing once with a
// connection error, is sent again, and the next call gets the stored
// result without running fn.
func TestDoOutcomeCallsAreSentAgain(t *testing.T) {
	for _, landed := range []bool{false, true} {
		t.Run(fmt.Sprint("landed: ", landed), func(t *testing.T) {
			s := &droppingStore{Store: store.NewMemory(), err: errRefused, landed: landed}
			s.drops.Store(1)
			job := &countingJob{result: "sent"}
			for range 2 {
				got, err := idempotency.Do(t.Context(), s, "email-42", job.fn)
				require.NoError(t, err)
				require.Equal(t, "sent", string(got))
			}
			require.EqualValues(t, 1, job.runs.Load())
			require.EqualValues(t, 2, s.sent.Load())
		})
	}
	t.Run("not a connection error", func(t *testing.T) {
		s := &droppingStore{Store: store.NewMemory(), err: errStoreDown}
		s.drops.Store(1)
		_, err := idempotency.Do(t.Context(), s, "email-42", (&countingJob{}).fn)
		require.True(t, errors.Is(err, errStoreDown))
		require.EqualValues(t, 1, s.sent.Load())
	})
}
