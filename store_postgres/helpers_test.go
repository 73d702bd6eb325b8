package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
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
// dropped when the test ends.
func newTestStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s := New(testPool(t), append([]Option{WithTable(testTable(t))}, opts...)...)
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() { dropTable(t, s) })
	return s
}

// isolatedPool returns the table of a fresh test store and a pool of its
// own whose connections use level as their default transaction isolation,
// holding at most maxConns connections (0: the pool's default).
func isolatedPool(t *testing.T, level string, maxConns int32) (table string, pool *pgxpool.Pool) {
	t.Helper()
	table = newTestStore(t).table
	cfg := testConfig(t)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
	pool = connect(t, cfg)
	t.Cleanup(pool.Close)
	return table, pool
}

func dropTable(t testing.TB, s *Store) {
	_, err := s.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.name)
	require.NoError(t, err)
}
