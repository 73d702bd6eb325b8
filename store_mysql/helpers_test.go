package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
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

// testDB returns a pool of 20 connections of the test's own on MYSQL_DSN.
func testDB(t testing.TB) *sql.DB {
	t.Helper()
	return openDB(t, testConfig(t), 20)
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
