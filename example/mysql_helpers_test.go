package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mysqlTestDB is a database of its own on MYSQL_DSN's server, for one
// example process tree: its tables cannot meet another test's.
type mysqlTestDB struct {
	admin *sql.DB
	name  string
	// DSN names the database: pass it to the example as -mysql-dsn.
	DSN string
}

// newMySQLTestDB creates the database, and drops it when the test ends. It
// skips the test when MYSQL_DSN is not set, and fails it when MYSQL_DSN is
// set but the server cannot be reached.
func newMySQLTestDB(t *testing.T) *mysqlTestDB {
	t.Helper()
	base := os.Getenv("MYSQL_DSN")
	if base == "" {
		t.Skip("example: MYSQL_DSN is not set; set it to run the -store mysql tests, " +
			"e.g. MYSQL_DSN='root@tcp(127.0.0.1:3306)/test'")
	}
	cfg, err := mysql.ParseDSN(base)
	require.NoError(t, err, "example: MYSQL_DSN")
	admin, err := sql.Open("mysql", base)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, admin.PingContext(ctx), "example: MYSQL_DSN is set but the server cannot be reached")

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := &mysqlTestDB{admin: admin, name: "example_test_" + hex.EncodeToString(b)}
	db.exec(t, "CREATE DATABASE "+db.name)
	t.Cleanup(func() {
		_, err := admin.Exec("DROP DATABASE " + db.name)
		assert.NoError(t, err)
	})
	cfg.DBName = db.name
	db.DSN = cfg.FormatDSN()
	return db
}

func (db *mysqlTestDB) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := db.admin.Exec(query, args...)
	require.NoError(t, err, query)
}

// count returns SELECT COUNT(*) FROM the database's table, with an optional
// WHERE clause.
func (db *mysqlTestDB) count(t *testing.T, table, where string) int {
	t.Helper()
	query := "SELECT COUNT(*) FROM " + db.name + "." + table
	if where != "" {
		query += " WHERE " + where
	}
	var n int
	require.NoError(t, db.admin.QueryRow(query).Scan(&n), query)
	return n
}

// paymentsOf returns the ids of the payments of amount in the ledger.
func (db *mysqlTestDB) paymentsOf(t *testing.T, amount int) []string {
	t.Helper()
	rows, err := db.admin.Query("SELECT id FROM "+db.name+".payments WHERE amount = ?", amount)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}
