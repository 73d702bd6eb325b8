package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	mysqlstore "github.com/seed43327c4c/idempotency/store_mysql"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
	sqlitestore "github.com/seed43327c4c/idempotency/store_sqlite"
)

// target is a real store the command is run against: the flags that name
// it, and the store itself, to write records with.
type target struct {
	name  string
	open  func(t *testing.T) (flags []string, s store.Store)
	flags []string
	store store.Store
}

// targets are the stores of every kind whose server the environment names.
var targets = []target{
	{name: "redis", open: redisTarget},
	{name: "redis cluster", open: redisClusterTarget},
	{name: "postgres", open: postgresTarget},
	{name: "sqlite", open: sqliteTarget},
	{name: "mysql", open: mysqlTarget},
}

// forEachTarget runs test against each target, as parallel subtests.
func forEachTarget(t *testing.T, test func(t *testing.T, tg target)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			tg.flags, tg.store = tg.open(t)
			t.Parallel()
			test(t, tg)
		})
	}
}

// result is what one run of the command gave.
type result struct {
	code           int
	stdout, stderr string
}

// json decodes the run's one JSON object.
func (r result) json(t *testing.T) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), "stdout %q, stderr %q", r.stdout, r.stderr)
	return out
}

// runCmd runs the command in process with args, then tg's flags.
func runCmd(tg target, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(append(args, tg.flags...), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// env returns the variable name's value, skipping the test when it is
// unset.
func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set; set it to run the command's tests against that server", name)
	}
	return v
}

// redisTarget is a store on REDIS_URL under a prefix of its own, whose
// keys are deleted when the test ends.
func redisTarget(t *testing.T) ([]string, store.Store) {
	url := env(t, "REDIS_URL")
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	opts.ContextTimeoutEnabled = true
	return redisOn(t, redis.NewClient(opts), url)
}

// redisClusterTarget is redisTarget on the Cluster of REDIS_CLUSTER_ADDRS,
// named to the command by one node's URL and addr= parameters.
func redisClusterTarget(t *testing.T) ([]string, store.Store) {
	addrs := strings.Split(env(t, "REDIS_CLUSTER_ADDRS"), ",")
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	return redisOn(t, client, "redis://"+addrs[0]+"?addr="+strings.Join(addrs[1:], "&addr="))
}

func redisOn(t *testing.T, client redis.UniversalClient, url string) ([]string, store.Store) {
	prefix := "idempotency-cmd-test:" + rand.Text() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		scan := func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				if err := node.Del(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		}
		if c, ok := client.(*redis.ClusterClient); ok {
			require.NoError(t, c.ForEachMaster(ctx, scan))
		} else {
			require.NoError(t, scan(ctx, client.(*redis.Client)))
		}
		_ = client.Close()
	})
	return []string{"-store", "redis", "-url", url, "-prefix", prefix}, redisstore.New(client, redisstore.WithPrefix(prefix))
}

// postgresTarget is a store on DATABASE_URL in a table of its own, dropped
// when the test ends.
func postgresTarget(t *testing.T) ([]string, store.Store) {
	url := env(t, "DATABASE_URL")
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	table := "cmd_test_" + strings.ToLower(rand.Text())
	s := pgstore.New(pool, pgstore.WithTable(table))
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP TABLE "+table)
		require.NoError(t, err)
		pool.Close()
	})
	return []string{"-store", "postgres", "-url", url, "-table", table}, s
}

// sqliteTarget is a store in a new SQLite file.
func sqliteTarget(t *testing.T) ([]string, store.Store) {
	path := filepath.Join(t.TempDir(), "records.db")
	db, err := sqlitestore.Open(context.Background(), path, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s := sqlitestore.New(db)
	require.NoError(t, s.Migrate(context.Background()))
	return []string{"-store", "sqlite", "-url", path}, s
}

// mysqlTarget is a store on MYSQL_DSN in a table of its own, dropped with
// its claim procedure when the test ends.
func mysqlTarget(t *testing.T) ([]string, store.Store) {
	dsn := env(t, "MYSQL_DSN")
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	table := "cmd_test_" + strings.ToLower(rand.Text())
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() {
		for _, drop := range []string{"DROP PROCEDURE `" + table + "_claim`", "DROP TABLE `" + table + "`"} {
			_, err := db.ExecContext(context.Background(), drop)
			require.NoError(t, err)
		}
		_ = db.Close()
	})
	return []string{"-store", "mysql", "-url", dsn, "-table", table}, s
}
