package mysqlstore

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
)

// partitionable returns a migrated table of its own, dropped through a
// direct pool when the test ends, the proxy to MYSQL_DSN's server, and a
// function opening pools of maxOpen connections through it. The proxy
// closes before the pools, ending every connection and any transaction
// left open on the server.
func partitionable(t *testing.T) (table string, proxy *tcpproxy.Proxy, through func(maxOpen int) *sql.DB) {
	t.Helper()
	migrated := newTestStore(t)
	cfg := testConfig(t)
	proxy, err := tcpproxy.Start(cfg.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	return migrated.table, proxy, func(maxOpen int) *sql.DB {
		c := cfg.Clone()
		c.Addr = proxy.Addr()
		return openDB(t, c, maxOpen)
	}
}

// TestRecordTimeoutOnAPartition: when the server stops answering after the
// claim (the handler partitions the proxy, then answers), the call that
// records the outcome gives up at the record timeout, and the error
// handler is told of the deadline. The plain store's client already has
// the handler's response; the transactional store's client, whose
// response waits for the commit, gets 503 when the commit times out, and
// the handler's 500 after the rollback.
func TestRecordTimeoutOnAPartition(t *testing.T) {
	const recordTimeout = 300 * time.Millisecond
	plain := func(db *sql.DB, table string) store.Store { return New(db, WithTable(table)) }
	transactional := func(db *sql.DB, table string) store.Store { return NewTx(db, WithTable(table)) }
	for _, tc := range []struct {
		name       string
		store      func(db *sql.DB, table string) store.Store
		status     int // the handler's
		call       string
		wantStatus int // the client's
	}{
		{"plain complete", plain, http.StatusCreated, "complete", http.StatusCreated},
		{"plain release", plain, http.StatusInternalServerError, "release", http.StatusInternalServerError},
		{"transactional commit", transactional, http.StatusCreated, "commit", http.StatusServiceUnavailable},
		{"transactional rollback", transactional, http.StatusInternalServerError, "rollback", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, proxy, through := partitionable(t)
			errs := make(chan error, 10)
			h := idempotency.New(
				idempotency.WithStore(tc.store(through(4), table)),
				idempotency.WithRecordTimeout(recordTimeout),
				idempotency.WithErrorHandler(func(_ *http.Request, err error) { errs <- err }),
			)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proxy.Partition()
				w.WriteHeader(tc.status)
			}))

			w := serveWithin(t, 10*recordTimeout, h)
			require.Equal(t, tc.wantStatus, w.Code)
			if tc.wantStatus == http.StatusServiceUnavailable {
				require.Contains(t, w.Body.String(), idempotency.ProblemStoreUnavailable)
			}
			require.Len(t, errs, 1, "one error reported")
			err := <-errs
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.True(t, strings.HasPrefix(err.Error(), "idempotency: "+tc.call+": "), "reported: %v", err)
		})
	}
}

// TestServerGoneMidRequest: a request whose claim the server does not
// answer (the proxy stalls) gets 503 at the store timeout, and runs
// nothing. Once the server answers again, retries (409 while the stalled
// claim, run late, holds the key for its lease) run the handler once, and
// then are replayed.
func TestServerGoneMidRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(db *sql.DB, table string) store.Store
	}{
		{"plain", func(db *sql.DB, table string) store.Store { return New(db, WithTable(table)) }},
		{"transactional", func(db *sql.DB, table string) store.Store { return NewTx(db, WithTable(table)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table, proxy, through := partitionable(t)
			var runs atomic.Int32
			h := idempotency.New(
				idempotency.WithStore(tc.store(through(4), table)),
				idempotency.WithStoreTimeout(300*time.Millisecond),
				idempotency.WithLease(time.Second),
				idempotency.WithErrorHandler(func(*http.Request, error) {}),
			)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			require.Equal(t, http.StatusCreated, sendTo(h, "warm-up").Code)

			proxy.Stall()
			w := serveWithin(t, 3*time.Second, h)
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
			require.Contains(t, w.Body.String(), idempotency.ProblemStoreUnavailable)
			require.EqualValues(t, 1, runs.Load(), "the handler ran only for the warm-up")

			proxy.Resume()
			deadline := time.Now().Add(5 * time.Second)
			for w = serveWithin(t, 3*time.Second, h); w.Code == http.StatusConflict; w = serveWithin(t, 3*time.Second, h) {
				require.True(t, time.Now().Before(deadline), "still in flight 5 s after the stall")
				time.Sleep(100 * time.Millisecond)
			}
			require.Equal(t, http.StatusCreated, w.Code)
			replay := serveWithin(t, 3*time.Second, h)
			require.Equal(t, http.StatusCreated, replay.Code)
			require.Equal(t, "true", replay.Header().Get("Idempotent-Replayed"))
			require.EqualValues(t, 2, runs.Load(), "the payment ran once")
		})
	}
}

// serveWithin sends a POST with key "k" through h and returns the
// response, failing the test if it has not returned within bound.
func serveWithin(t *testing.T, bound time.Duration, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- sendTo(h, "k") }()
	select {
	case w := <-done:
		return w
	case <-time.After(bound):
		require.FailNow(t, "pinned", "the request has not returned %v after it was sent", bound)
		return nil
	}
}
