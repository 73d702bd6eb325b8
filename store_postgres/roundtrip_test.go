package pgstore_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// roundTrips counts what the middleware asks of Postgres two ways: the
// statements pgx runs (a tracer, which also sees prepares and batches), and
// the messages written to the connection, each of which waits for an answer.
type roundTrips struct {
	statements atomic.Int64
	writes     atomic.Int64
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// during returns how many statements and writes f caused.
func (c *roundTrips) during(f func()) (statements, writes int64) {
	s0, w0 := c.statements.Load(), c.writes.Load()
	f()
	return c.statements.Load() - s0, c.writes.Load() - w0
}

// countingConn counts the writes to one connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func TestRoundTripsPerRequest(t *testing.T) {
	cfg := pgstore.TestConfig(t)
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, writes: &rt.writes}, nil
	}
	// One connection, so the warm-up below fills the only statement cache,
	// and no liveness ping on it however slowly the test runs: a ping is the
	// pool's cost, not the request's.
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool := pgstore.Connect(t, cfg)
	t.Cleanup(pool.Close)
	s := pgstore.New(pool, pgstore.WithTable(pgstore.TestTable(t)))
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() { pgstore.DropTable(t, s) })

	entered, proceed := make(chan struct{}, 1), make(chan struct{})
	handler := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-proceed
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
	send := func(path, key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}
	// Warm-up: every statement prepared once on the connection.
	require.Equal(t, http.StatusCreated, send("/pay", "warm", "a").Code)
	require.Equal(t, http.StatusCreated, send("/pay", "warm", "a").Code)

	var w *httptest.ResponseRecorder
	assertCost := func(what string, want int64, f func()) {
		t.Helper()
		statements, writes := rt.during(f)
		assert.Equal(t, want, statements, "statements for %s", what)
		assert.Equal(t, want, writes, "round trips for %s", what)
	}
	assertCost("a first request (claim, complete)", 2, func() { w = send("/pay", "k1", "a") })
	assert.Equal(t, http.StatusCreated, w.Code)
	assertCost("a replay (claim)", 1, func() { w = send("/pay", "k1", "a") })
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	assertCost("a reused key (claim)", 1, func() { w = send("/pay", "k1", "b") })
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)

	done := make(chan struct{})
	go func() {
		defer close(done)
		send("/slow", "k2", "a")
	}()
	<-entered
	assertCost("a conflict with a request in flight (claim)", 1, func() { w = send("/slow", "k2", "a") })
	assert.Equal(t, http.StatusConflict, w.Code)
	close(proceed)
	<-done
}
