package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/internal/tcpproxy"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// partitionable returns a store whose client reaches REDIS_URL through a
// proxy, and the proxy. The client heeds context deadlines
// (ContextTimeoutEnabled, which WithRecordTimeout needs), and its own read
// and write timeouts are far longer than a test waits, so only a deadline
// can end a call on a partitioned connection. The store's keys are deleted
// through a direct client when the test ends, after the proxy has closed.
func partitionable(t *testing.T) (*redisstore.Store, *tcpproxy.Proxy) {
	t.Helper()
	_, prefix := newStore(t, standalone(t))
	var proxy *tcpproxy.Proxy
	client := standaloneWith(t, func(opts *redis.Options) {
		var err error
		proxy, err = tcpproxy.Start(opts.Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		opts.Addr = proxy.Addr()
		opts.ContextTimeoutEnabled = true
		opts.ReadTimeout, opts.WriteTimeout = time.Minute, time.Minute
	})
	return redisstore.New(client, redisstore.WithPrefix(prefix)), proxy
}

// TestRecordTimeoutOnAPartition: when Redis stops answering after the
// claim (the handler partitions the proxy, then answers), the call that
// records the outcome, Complete for a 201 and Release for a 500, gives up
// at the record timeout: the request returns instead of waiting on the
// silent connection, and the error handler is told of the deadline.
func TestRecordTimeoutOnAPartition(t *testing.T) {
	const recordTimeout = 300 * time.Millisecond
	for _, tc := range []struct {
		call   string
		status int
	}{
		{"complete", http.StatusCreated},
		{"release", http.StatusInternalServerError},
	} {
		t.Run(tc.call, func(t *testing.T) {
			t.Parallel()
			s, proxy := partitionable(t)
			errs := make(chan error, 10)
			h := idempotency.New(
				idempotency.WithStore(s),
				idempotency.WithRecordTimeout(recordTimeout),
				idempotency.WithErrorHandler(func(_ *http.Request, err error) { errs <- err }),
			)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proxy.Partition()
				w.WriteHeader(tc.status)
			}))

			require.Equal(t, tc.status, serveWithin(t, 10*recordTimeout, h))
			require.Len(t, errs, 1, "one error reported")
			err := <-errs
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.True(t, strings.HasPrefix(err.Error(), "idempotency: "+tc.call+": "), "reported: %v", err)
		})
	}
}

// serveWithin sends a POST with a key through h and returns the status
// the client got, failing the test if the request has not returned within
// bound.
func serveWithin(t *testing.T, bound time.Duration, h http.Handler) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		done <- w.Code
	}()
	select {
	case status := <-done:
		return status
	case <-time.After(bound):
		require.FailNow(t, "pinned", "the request has not returned %v after it was sent", bound)
		return 0
	}
}
