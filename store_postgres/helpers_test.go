package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
)

// testConfig returns the pool configuration DATABASE_URL names, or skips
// the test when it is not set.
func testConfig(t testing.TB) *pgxpool.Config {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("pgstore: DATABASE_URL is not set; set it to run the Postgres store tests, " +
			"e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err, "pgstore: DATABASE_URL")
	return cfg
}

// connect returns a pool for cfg that has reached the server, or fails the
// test: DATABASE_URL is set, so an unreachable server is an error.
func connect(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		p.Close()
		require.NoError(t, err, "pgstore: DATABASE_URL is set but Postgres cannot be reached")
	}
	return p
}

// ownPool returns a pool of the test's own on DATABASE_URL, its
// configuration changed by configure first, closed when the test ends.
func ownPool(t testing.TB, configure func(cfg *pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg := testConfig(t)
	configure(cfg)
	p := connect(t, cfg)
	t.Cleanup(p.Close)
	return p
}

// neverPing keeps a pool from pinging a connection for liveness before it
// hands it out, so that a dead connection is met by a statement.
func neverPing(context.Context, pgxpool.ShouldPingParams) bool { return false }

// testPool returns a pool of 20 connections shared by the package's tests.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg := testConfig(t)
	poolOnce.Do(func() {
		cfg.MaxConns = 20
		pool = connect(t, cfg)
	})
	require.NotNil(t, pool, "pgstore: DATABASE_URL is set but Postgres cannot be reached")
	return pool
}

// testTable returns a table name no other test uses.
func testTable(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "pgstore_test_" + hex.EncodeToString(b)
}

// newTestStore returns a store on a fresh, migrated table of its own,
// reached through the shared pool and dropped when the test ends.
func newTestStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	return newTestStoreOn(t, testPool(t), opts...)
}

// newTestStoreOn is newTestStore reached through p.
func newTestStoreOn(t testing.TB, p *pgxpool.Pool, opts ...Option) *Store {
	t.Helper()
	s := New(p, append([]Option{WithTable(testTable(t))}, opts...)...)
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() { dropTable(t, s) })
	return s
}

// closedFirst has s closed when the test ends, before the cleanups
// registered earlier (such as dropping its table) run.
func closedFirst[S interface{ Close() }](t testing.TB, s S) S {
	t.Cleanup(s.Close)
	return s
}

func dropTable(t testing.TB, s *Store) {
	_, err := s.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.name)
	require.NoError(t, err)
}

// sendTo sends a POST to /payments with key and header through h.
func sendTo(h http.Handler, key string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Idempotency-Key", key)
	for name, values := range header {
		r.Header[name] = values
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// mustClaim claims key, which must be free or expired, and returns the
// claimed record.
func mustClaim(t *testing.T, s *Store, key, fingerprint, token string, lease time.Duration) store.Record {
	t.Helper()
	rec, claimed, err := s.Claim(context.Background(), key, fingerprint, token, lease)
	require.NoError(t, err)
	require.True(t, claimed, "%q is claimed", key)
	return rec
}

// mustDeleteExpired runs one sweep of up to batch rows and returns how
// many it deleted.
func mustDeleteExpired(t *testing.T, s *Store, batch int) int {
	t.Helper()
	n, err := s.DeleteExpired(context.Background(), batch)
	require.NoError(t, err)
	return n
}

// isolatedStores returns a plain and a transactional store on one fresh
// table, reached through a pool of their own whose connections use level
// as their default transaction isolation, holding at most maxConns
// connections (0: the pool's default).
func isolatedStores(t *testing.T, level string, maxConns int32) (*Store, *TxStore) {
	t.Helper()
	table := newTestStore(t).table
	p := ownPool(t, func(cfg *pgxpool.Config) {
		if maxConns > 0 {
			cfg.MaxConns = maxConns
		}
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
	})
	return New(p, WithTable(table)), NewTx(p, WithTable(table))
}

// newTestTxStore returns a transactional store on a fresh table of its own,
// beside which a ledger table (name + "_ledger", one text column, the
// primary key) stands for the handler's own data.
func newTestTxStore(t *testing.T) *TxStore {
	t.Helper()
	return newTestTxStoreOn(t, testPool(t))
}

// newTestTxStoreOn is newTestTxStore reached through p.
func newTestTxStoreOn(t *testing.T, p *pgxpool.Pool) *TxStore {
	t.Helper()
	s := &TxStore{Store: newTestStoreOn(t, p)}
	_, err := s.pool.Exec(context.Background(), `CREATE TABLE `+s.ledger()+` (id text PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+s.ledger())
		require.NoError(t, err)
	})
	return s
}

func (s *TxStore) ledger() string { return pgx.Identifier{s.table + "_ledger"}.Sanitize() }

// writeLedger inserts id into the ledger through the transaction ctx
// carries, as a protected handler does.
func (s *TxStore) writeLedger(ctx context.Context, id string) error {
	tx, ok := Tx(ctx)
	if !ok {
		return errors.New("the context carries no transaction")
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ($1)`, id)
	return err
}

// ledgerRows returns the committed ids in the ledger, as another
// connection sees them.
func (s *TxStore) ledgerRows(t *testing.T) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT id FROM `+s.ledger()+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// rows returns how many committed rows the store's table holds for key.
func (s *TxStore) rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+s.name+` WHERE key = $1`, rowKey(key)).Scan(&n))
	return n
}

// mustBeginClaim claims key in a transaction and writes id to the ledger
// through the transaction the handler would get.
func mustBeginClaim(t *testing.T, s *TxStore, key, fingerprint, id string) (store.Record, store.Tx) {
	t.Helper()
	ctx, rec, tx, err := s.BeginClaim(context.Background(), key, fingerprint, "token-"+id)
	require.NoError(t, err)
	require.NotNil(t, tx, "the key is claimed")
	// A failed assertion must not leave the transaction open: the table's
	// DROP at cleanup would wait for it until the test binary times out.
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, ok := Tx(ctx)
	require.True(t, ok, "the context carries the transaction")
	require.NoError(t, s.writeLedger(ctx, id))
	return rec, tx
}

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
	return ownPool(t, func(cfg *pgxpool.Config) {
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
		cfg.ShouldPing = neverPing
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
// connections, with as many first requests at once and their replays, so
// that each has prepared every statement.
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
	for i := range conns { // and a replay's statements
		assert.Equal(t, http.StatusCreated, send("/slow", fmt.Sprintf("warm-%d", i), "a").Code)
	}

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
