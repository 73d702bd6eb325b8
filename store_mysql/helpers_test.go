package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// testConfig returns the driver configuration MYSQL_DSN names, or skips
// the test when it is not set.
func testConfig(t testing.TB) *mysql.Config {
	t.Helper()
	dsn := os.Getenv("MYSQL_DSN")
	if dsn == "" {
		t.Skip("mysqlstore: MYSQL_DSN is not set; set it to run the MySQL store tests, " +
			"e.g. MYSQL_DSN='root@tcp(127.0.0.1:3306)/test'")
	}
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err, "mysqlstore: MYSQL_DSN")
	return cfg
}

// openDB returns a pool of maxOpen connections for cfg that has reached
// the server, closed when the test ends, or fails the test: MYSQL_DSN is
// set, so an unreachable server is an error.
func openDB(t testing.TB, cfg *mysql.Config, maxOpen int) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, db.PingContext(ctx), "mysqlstore: MYSQL_DSN is set but the server cannot be reached")
	return db
}

// testDB returns a pool of 8 connections of the test's own on MYSQL_DSN.
func testDB(t testing.TB) *sql.DB {
	t.Helper()
	return openDB(t, testConfig(t), 8)
}

// testTable returns a table name of the test's own.
func testTable(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "idem_test_" + hex.EncodeToString(b)
}

// dropTable drops s's table and procedure when the test ends.
func dropTable(t testing.TB, s *Store) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := s.db.ExecContext(ctx, s.sql.rewrite.Replace("DROP PROCEDURE IF EXISTS `idempotency_keys_claim`"))
		require.NoError(t, err)
		_, err = s.db.ExecContext(ctx, s.sql.rewrite.Replace("DROP TABLE IF EXISTS `idempotency_keys`"))
		require.NoError(t, err)
	})
}

// newTestStoreOn returns a migrated store on db with a table of its own,
// dropped when the test ends.
func newTestStoreOn(t testing.TB, db *sql.DB, opts ...Option) *Store {
	t.Helper()
	s := New(db, append([]Option{WithTable(testTable(t))}, opts...)...)
	dropTable(t, s)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// newTestStore is newTestStoreOn a pool of the test's own.
func newTestStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	return newTestStoreOn(t, testDB(t), opts...)
}

// newTestTxStore is newTestStore in transactional mode.
func newTestTxStore(t testing.TB, opts ...Option) *TxStore {
	t.Helper()
	return &TxStore{Store: newTestStore(t, opts...)}
}

// sendTo sends a POST to /payments with key through h.
func sendTo(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// mustClaim claims key, which must be free or expired, under a fresh
// token and returns the claimed record.
func mustClaim(t *testing.T, s store.Store, key, fingerprint string, lease time.Duration) store.Record {
	t.Helper()
	rec, claimed, err := s.Claim(context.Background(), key, fingerprint, newToken(), lease)
	require.NoError(t, err)
	require.True(t, claimed, "%q is claimed", key)
	return rec
}

// newToken returns a random owner token.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fillPool opens every connection db may hold, so that growth is not
// counted as a leak.
func fillPool(t testing.TB, db *sql.DB) {
	t.Helper()
	n := db.Stats().MaxOpenConnections
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(context.Background())
		require.NoError(t, err)
		conns[i] = c
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
}

// longLease outlasts any test.
const longLease = time.Minute
