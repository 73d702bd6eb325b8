package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
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

// countedPool returns a pool of maxConns connections whose statements and
// writes rt counts. It never pings a connection for liveness, however
// slowly the test runs: a ping is the pool's cost, not a request's.
func countedPool(t *testing.T, rt *roundTrips, maxConns int32) *pgxpool.Pool {
	cfg := pgstore.TestConfig(t)
	cfg.ConnConfig.Tracer = rt
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, writes: &rt.writes}, nil
	}
	cfg.MaxConns = maxConns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool := pgstore.Connect(t, cfg)
	t.Cleanup(pool.Close)
	return pool
}

func TestRoundTripsPerRequest(t *testing.T) {
	// One connection, so the warm-up fills the only statement cache.
	rt := &roundTrips{}
	s := pgstore.New(countedPool(t, rt, 1), pgstore.WithTable(pgstore.TestTable(t)))
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() { pgstore.DropTable(t, s) })
	requireCosts(t, rt, s, nil, 1, requestCosts{
		first:    cost{2, "claim, complete"},
		replay:   cost{1, "claim"},
		reused:   cost{1, "claim"},
		conflict: cost{1, "claim"},
	})
}

// cost is what one request must cost: n statements and n round trips.
type cost struct {
	n    int64
	what string
}

// requestCosts are the costs of each kind of request.
type requestCosts struct {
	first, replay, reused, conflict cost
}

// requireCosts puts the middleware with st in front of a handler that
// calls write (unless nil; an error answers 500) and answers 201, and
// checks what a first request, a replay, a reused key and a conflict with a
// request in flight cost, as rt counts them. It first warms up conns
// connections, with as many first requests at once, so that each has
// prepared every statement.
func requireCosts(t *testing.T, rt *roundTrips, st store.Store, write func(r *http.Request) error, conns int, want requestCosts) {
	t.Helper()
	entered, proceed := make(chan struct{}, conns), make(chan struct{})
	handler := idempotency.New(idempotency.WithStore(st))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if write != nil {
			if err := write(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
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

	var warm sync.WaitGroup
	for i := range conns {
		warm.Go(func() {
			w := send("/slow", fmt.Sprintf("warm-%d", i), "a")
			assert.Equal(t, http.StatusCreated, w.Code, w.Body.String())
		})
	}
	for range conns {
		<-entered
	}
	close(proceed)
	warm.Wait()

	var w *httptest.ResponseRecorder
	assertCost := func(kind string, want cost, f func()) {
		t.Helper()
		statements, writes := rt.during(f)
		assert.Equal(t, want.n, statements, "statements for %s (%s)", kind, want.what)
		assert.Equal(t, want.n, writes, "round trips for %s (%s)", kind, want.what)
	}
	assertCost("a first request", want.first, func() { w = send("/pay", "k1", "a") })
	assert.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assertCost("a replay", want.replay, func() { w = send("/pay", "k1", "a") })
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	assertCost("a reused key", want.reused, func() { w = send("/pay", "k1", "b") })
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)

	proceed = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		send("/slow", "k2", "a")
	}()
	<-entered
	assertCost("a conflict with a request in flight", want.conflict, func() { w = send("/slow", "k2", "a") })
	assert.Equal(t, http.StatusConflict, w.Code)
	close(proceed)
	<-done
}
