package pgstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// countingTxStore counts BeginClaim calls.
type countingTxStore struct {
	*pgstore.TxStore
	begins atomic.Int64
}

func (s *countingTxStore) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, store.Record, store.Tx, error) {
	s.begins.Add(1)
	return s.TxStore.BeginClaim(ctx, key, fingerprint, token)
}

// txFixture is a transactional store on a table of its own, a ledger table
// beside it, and a handler that inserts the request's key into the ledger
// through the request's transaction, then, once release is closed, answers
// 503 to a request with an X-Fail header and 201 to any other.
type txFixture struct {
	store   *countingTxStore
	pool    *pgxpool.Pool
	ledger  string
	entered chan struct{}
	release chan struct{}
}

func newTxFixture(t *testing.T) *txFixture {
	cfg := pgstore.TestConfig(t)
	cfg.MaxConns = 4
	pool := pgstore.Connect(t, cfg)
	t.Cleanup(pool.Close)
	f := &txFixture{
		store:   &countingTxStore{TxStore: pgstore.NewTx(pool, pgstore.WithTable(pgstore.TestTable(t)))},
		pool:    pool,
		ledger:  pgstore.TestTable(t),
		entered: make(chan struct{}, 10),
		release: make(chan struct{}),
	}
	ctx := context.Background()
	require.NoError(t, f.store.Migrate(ctx))
	t.Cleanup(func() { pgstore.DropTable(t, f.store.Store) })
	_, err := pool.Exec(ctx, `CREATE TABLE `+f.ledger+` (key text NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), `DROP TABLE `+f.ledger)
		require.NoError(t, err)
	})
	return f
}

func (f *txFixture) handler(opts ...idempotency.Option) http.Handler {
	opts = append([]idempotency.Option{idempotency.WithStore(f.store)}, opts...)
	return idempotency.New(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgstore.Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+f.ledger+` (key) VALUES ($1)`, r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.entered <- struct{}{}
		<-f.release
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
}

// ledgerRows returns the committed rows of the ledger for key.
func (f *txFixture) ledgerRows(t *testing.T, key string) int {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT key FROM `+f.ledger+` WHERE key = $1`, key)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return len(keys)
}

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

// TestTxMiddlewareWaitThenReplay: with WithWait, a duplicate that arrives
// while the first request's transaction is open polls (each poll a
// BeginClaim that reports the key in flight) until the commit, then gets
// the replay; the handler ran once and its row was committed once.
func TestTxMiddlewareWaitThenReplay(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t)
	h := f.handler(idempotency.WithWait(time.Minute))
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- sendTo(h, "k", nil) }()
	<-f.entered
	dup := make(chan *httptest.ResponseRecorder)
	go func() { dup <- sendTo(h, "k", nil) }()
	require.Eventually(t, func() bool { return f.store.begins.Load() >= 3 }, time.Minute, 5*time.Millisecond,
		"the duplicate polled the key in flight")
	assert.Zero(t, f.ledgerRows(t, "k"), "nothing is committed while the handler runs")
	close(f.release)

	w := <-first
	require.Equal(t, http.StatusCreated, w.Code)
	d := <-dup
	assert.Equal(t, http.StatusCreated, d.Code)
	assert.Equal(t, "true", d.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, w.Body.String(), d.Body.String())
	assert.Equal(t, 1, f.ledgerRows(t, "k"))
}

// TestTxMiddleware5xxRollsBack: a 5xx is sent as written, and the
// handler's row is rolled back with the claim, so the retry runs afresh
// and its row is the only one.
func TestTxMiddleware5xxRollsBack(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t)
	close(f.release)
	h := f.handler()
	w := sendTo(h, "k", http.Header{"X-Fail": {"1"}})
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Zero(t, f.ledgerRows(t, "k"), "the 5xx's row was rolled back")

	w = sendTo(h, "k", nil)
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Empty(t, w.Header().Get("Idempotent-Replayed"), "the retry ran afresh")
	assert.Equal(t, 1, f.ledgerRows(t, "k"))
}
