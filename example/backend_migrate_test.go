package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

func TestFlagsMigrateFrom(t *testing.T) {
	c, err := parseFlags([]string{"-store", "postgres", "-migrate-from", "redis"}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, "redis", c.migrateFrom)

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"onto itself":  {[]string{"-store", "redis", "-migrate-from", "redis"}, "is the -store itself"},
		"the default":  {[]string{"-migrate-from", "memory"}, "is the -store itself"},
		"from memory":  {[]string{"-store", "redis", "-migrate-from", "memory"}, "there is nothing to move"},
		"unknown":      {[]string{"-store", "redis", "-migrate-from", "mongodb"}, "want sqlite, redis, postgres or mysql"},
		"sqlite twice": {[]string{"-workers", "2", "-addr", ":8080", "-migrate-from", "sqlite"}, "is the -store itself"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args, env(nil))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestExampleRefusesMigrationOntoItself: the process exits at start-up
// with a usage error that says why.
func TestExampleRefusesMigrationOntoItself(t *testing.T) {
	out, err := exec.Command(buildExample(t), "-addr", "127.0.0.1:0", "-store", "postgres", "-migrate-from", "postgres").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v\n%s", err, out)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, string(out), "-migrate-from postgres is the -store itself")
}

// migrationStores returns a function that opens, for each subtest, a
// migration from a Redis store under a prefix of its own to a Postgres
// store in transactional mode on a table of its own, both in servers of
// this test.
func migrationStores(t *testing.T) func(t *testing.T) *store.TxMigration {
	client := redisClientOf(t, redisURL(t))
	pool := poolOf(t, newPGTestDB(t))
	var n atomic.Int32
	return func(t *testing.T) *store.TxMigration {
		name := fmt.Sprint("migrate_", n.Add(1))
		to := pgstore.NewTx(pool, pgstore.WithTable(name))
		require.NoError(t, to.Migrate(t.Context()))
		return store.Migrate(redisstore.New(client, redisstore.WithPrefix(name+":")), to).(*store.TxMigration)
	}
}

// TestMigrateConformanceRedisToPostgres: a migration from Redis to
// Postgres in transactional mode passes the conformance suites of a
// Store, a TxStore and an Admin.
func TestMigrateConformanceRedisToPostgres(t *testing.T) {
	open := migrationStores(t)
	t.Run("Store", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
	})
	t.Run("TxStore", func(t *testing.T) {
		storetest.RunTx(t, func(t *testing.T) store.TxStore { return open(t) })
	})
	t.Run("Admin", func(t *testing.T) {
		storetest.RunAdmin(t, func(t *testing.T) store.Admin { return open(t) })
	})
}

// redisClientOf returns the example's client of the Redis at rawURL,
// closed when the test ends.
func redisClientOf(t *testing.T, rawURL string) *redis.Client {
	t.Helper()
	client, err := redisClient(config{redisURL: rawURL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// poolOf returns a pool on db, closed when the test ends.
func poolOf(t *testing.T, db *pgTestDB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// switchProxy is the load balancer in front of a cut-over: it sends each
// request to the service it points at when the request arrives, and
// answers GET /payments itself with the payments of both ledgers.
type switchProxy struct {
	target atomic.Pointer[url.URL]
	old    ledger
	new    ledger
}

func (p *switchProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/payments" {
		var all []payment
		for _, l := range []ledger{p.old, p.new} {
			payments, err := l.List(r.Context(), account(r))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			all = append(all, payments...)
		}
		writeJSON(w, http.StatusOK, all)
		return
	}
	target := p.target.Load()
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}).ServeHTTP(w, r)
}

// TestExampleCutOverRedisToPostgres: a storm of 100 keys x 10 duplicates
// runs while the service is cut over from -store redis to -store postgres
// -migrate-from redis: once a third of the payments are made, the load
// balancer sends every new request to the migrating service, and the old
// one is stopped (it finishes the requests it has). Every key is paid
// once across the two ledgers, and every duplicate gets the first answer,
// whether it reached the old service, or the new one while the key was in
// flight or done in Redis.
func TestExampleCutOverRedisToPostgres(t *testing.T) {
	rURL := redisURL(t)
	db := newPGTestDB(t)
	old := startExample(t, "-store", "redis", "-redis-url", rURL, "-delay", "300ms")
	migrating := startExample(t, "-store", "postgres", "-database-url", db.URL, "-migrate-from", "redis", "-redis-url", rURL,
		"-workers", "2", "-delay", "300ms")

	client := redisClientOf(t, rURL)
	proxy := &switchProxy{old: &redisLedger{client: client}, new: &postgresLedger{pool: poolOf(t, db)}}
	oldURL, err := url.Parse(old.URL)
	require.NoError(t, err)
	newURL, err := url.Parse(migrating.URL)
	require.NoError(t, err)
	proxy.target.Store(oldURL)
	lb := httptest.NewServer(proxy)
	t.Cleanup(lb.Close)

	cut := make(chan int)
	go func() {
		defer close(cut)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			if n, err := client.LLen(ctx, paymentsKey(testAccount)).Result(); err == nil && n >= 33 {
				proxy.target.Store(newURL)
				cut <- int(n)
				old.Stop()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	runStorm(t, lb.URL, 100, 10)
	atCut, ok := <-cut
	require.True(t, ok, "the storm ended before a third of its payments were made")
	<-cut

	ctx := t.Context()
	inRedis, err := proxy.old.List(ctx, testAccount)
	require.NoError(t, err)
	inPostgres, err := proxy.new.List(ctx, testAccount)
	require.NoError(t, err)
	assert.Len(t, inRedis, 100-len(inPostgres), "each key paid once across the two ledgers")
	assert.Positive(t, len(inPostgres), "payments were made after the cut")
	assert.GreaterOrEqual(t, len(inRedis), atCut, "payments were made before the cut")
	copied := db.count(t, "idempotency_keys", "state = 2") - len(inPostgres)
	assert.Positive(t, copied, "records done in Redis were copied into Postgres")
	t.Logf("cut at %d payments: %d in Redis, %d in Postgres, %d records copied", atCut, len(inRedis), len(inPostgres), copied)
}
