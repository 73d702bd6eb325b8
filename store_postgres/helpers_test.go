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
	poolErr  error
)

// testPool returns a pool shared by the package's tests. Without
// DATABASE_URL the test is skipped; with DATABASE_URL set and the server
// unreachable it fails.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("pgstore: DATABASE_URL is not set; set it to run the Postgres store tests, " +
			"e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 20
		pool, poolErr = pgxpool.NewWithConfig(context.Background(), cfg)
		if poolErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		poolErr = pool.Ping(ctx)
	})
	require.NoError(t, poolErr, "pgstore: DATABASE_URL is set but Postgres cannot be reached")
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

func dropTable(t testing.TB, s *Store) {
	_, err := s.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.name)
	require.NoError(t, err)
}
