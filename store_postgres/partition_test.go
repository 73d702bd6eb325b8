package pgstore_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// partitionable returns a pool whose connections reach DATABASE_URL
// through a proxy, the proxy, and a migrated table of its own. When the
// test ends the proxy closes, and with it every connection through it,
// which ends any transaction left open on the server; then the pool
// closes, and the table is dropped through a direct pool.
func partitionable(t *testing.T) (*pgxpool.Pool, *tcpproxy.Proxy, string) {
	t.Helper()
	direct := pgstore.Connect(t, pgstore.TestConfig(t))
	t.Cleanup(direct.Close)
	table := pgstore.TestTable(t)
	migrated := pgstore.New(direct, pgstore.WithTable(table))
	require.NoError(t, migrated.Migrate(context.Background()))
	t.Cleanup(func() { pgstore.DropTable(t, migrated) })

	cfg := pgstore.TestConfig(t)
	proxy, err := tcpproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	var pool *pgxpool.Pool
	t.Cleanup(func() {
		if pool != nil {
			pool.Close()
		}
	})
	// Closed first: pgx closes a connection that timed out in the
	// background, sending a cancel request first, and the pool's Close
	// waits for that, which a partitioned proxy would stretch to pgx's
	// limit of 15 seconds.
	t.Cleanup(func() { _ = proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	portNumber, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(portNumber)
	pool = pgstore.Connect(t, cfg)
	return pool, proxy, table
}

// TestRecordTimeoutOnAPartition: when Postgres stops answering after the
// claim (the handler partitions the proxy, then answers), the call that
// records the outcome gives up at the record timeout, and the error
// handler is told of the deadline. The plain store's client already has
// the handler's response when Complete or Release times out; the
// transactional store's client, whose response waits for the commit, gets
// 503 when the commit times out, and the handler's 500 after the rollback.
func TestRecordTimeoutOnAPartition(t *testing.T) {
	const recordTimeout = 300 * time.Millisecond
	plain := func(pool *pgxpool.Pool, table string) store.Store {
		return pgstore.New(pool, pgstore.WithTable(table))
	}
	transactional := func(pool *pgxpool.Pool, table string) store.Store {
		return pgstore.NewTx(pool, pgstore.WithTable(table))
	}
	for _, tc := range []struct {
		name       string
		store      func(pool *pgxpool.Pool, table string) store.Store
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
			t.Parallel()
			pool, proxy, table := partitionable(t)
			errs := make(chan error, 10)
			h := idempotency.New(
				idempotency.WithStore(tc.store(pool, table)),
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

// serveWithin sends a POST with a key through h and returns the response,
// failing the test if the request has not returned within bound.
func serveWithin(t *testing.T, bound time.Duration, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		done <- sendTo(h, "k", nil)
	}()
	select {
	case w := <-done:
		return w
	case <-time.After(bound):
		require.FailNow(t, "pinned", "the request has not returned %v after it was sent", bound)
		return nil
	}
}
