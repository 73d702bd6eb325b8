package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pgTestDB is a schema of its own, owned by a login role of its own, for
// one example process tree: its tables cannot meet another test's, and its
// connections are the role's, so a test can cut them off.
type pgTestDB struct {
	admin  *pgxpool.Pool
	schema string
	role   string
	// URL connects as the role with the schema as search_path: pass it to
	// the example as -database-url.
	URL string
}

// newPGTestDB creates the role and the schema, and drops both when the test
// ends. It skips the test when DATABASE_URL is not set, and fails it when
// DATABASE_URL is set but Postgres cannot be reached.
func newPGTestDB(t *testing.T) *pgTestDB {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		t.Skip("example: DATABASE_URL is not set; set it to run the -store postgres tests, " +
			"e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	require.NoError(t, admin.Ping(ctx), "example: DATABASE_URL is set but Postgres cannot be reached")

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "example_test_" + hex.EncodeToString(b)
	db := &pgTestDB{admin: admin, schema: name, role: name}
	db.exec(t, "CREATE ROLE "+name+" LOGIN")
	db.exec(t, "CREATE SCHEMA "+name+" AUTHORIZATION "+name)
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name)
		assert.NoError(t, err)
		for _, sql := range []string{"DROP SCHEMA " + name + " CASCADE", "DROP ROLE " + name} {
			_, err := admin.Exec(ctx, sql)
			assert.NoError(t, err, sql)
		}
	})

	u, err := url.Parse(base)
	require.NoError(t, err)
	u.User = url.User(name)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	db.URL = u.String()
	return db
}

func (db *pgTestDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := db.admin.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// count returns SELECT count(*) FROM the schema's table, with an optional
// WHERE clause.
func (db *pgTestDB) count(t *testing.T, table, where string) int {
	t.Helper()
	sql := "SELECT count(*) FROM " + db.schema + "." + table
	if where != "" {
		sql += " WHERE " + where
	}
	var n int
	require.NoError(t, db.admin.QueryRow(context.Background(), sql).Scan(&n), sql)
	return n
}

// terminate ends every connection the role has open and returns how many
// there were.
func (db *pgTestDB) terminate(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, db.admin.QueryRow(context.Background(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1", db.role).Scan(&n))
	return n
}
