package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// rawRows returns every row of the schema's table as the server sends it,
// each column's bytes one after another.
func (db *pgTestDB) rawRows(t *testing.T, table string) [][]byte {
	t.Helper()
	rows, err := db.admin.Query(context.Background(), "SELECT * FROM "+db.schema+"."+table)
	require.NoError(t, err)
	defer rows.Close()
	var dump [][]byte
	for rows.Next() {
		var row []byte
		for _, col := range rows.RawValues() {
			row = append(row, col...)
		}
		dump = append(dump, row)
	}
	require.NoError(t, rows.Err())
	return dump
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

// paymentsOf returns the ids of the payments of amount in the ledger.
func (db *pgTestDB) paymentsOf(t *testing.T, amount int) []string {
	t.Helper()
	rows, err := db.admin.Query(context.Background(), `SELECT id FROM `+db.schema+`.payments WHERE amount = $1`, amount)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// chaosAnswer is what a chaos client finally got, and what it retried on
// the way: transport errors, 500s, 502s, 503s and 409s.
type chaosAnswer struct {
	stormResponse
	retried map[string]int
	err     error
}

// postUntilCreated posts body under key until the answer is a 201,
// retrying as a real client does: a 409 after its Retry-After (see
// postUntilDone), a transport error, a 500, 502 or 503 after 100 ms. Any other
// answer, or still no 201 at deadline, is an error.
func postUntilCreated(client *http.Client, baseURL, key, body string, deadline time.Time) chaosAnswer {
	a := chaosAnswer{retried: map[string]int{}}
	for time.Now().Before(deadline) {
		resp, conflicts, err := postUntilDone(client, baseURL, key, body)
		a.retried["409"] += conflicts
		switch {
		case err != nil:
			a.retried["transport error"]++
		case resp.status == http.StatusCreated:
			a.stormResponse = resp
			return a
		case slices.Contains(retriedStatuses, resp.status):
			a.retried[strconv.Itoa(resp.status)]++
		default:
			a.err = fmt.Errorf("unexpected answer %d: %s", resp.status, resp.body)
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.err = fmt.Errorf("no 201 by the deadline, retried %v", a.retried)
	return a
}

// faultKey is key k of the keys a fault test posts under prefix.
func faultKey(prefix string, k int) string { return fmt.Sprintf("%s-%d", prefix, k) }

// faultBody is key k's payment: an amount no other key posts.
func faultBody(k int) string { return fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+k) }

// retriedStatuses are the answers faultStorm's clients send again.
var retriedStatuses = []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}

// faultStorm sends dups concurrent POST /payments for each of keys keys
// (faultKey(prefix, k) with faultBody(k)), each client retrying as a real
// client would: a 409 after Retry-After (postUntilDone), a 500, 502 or 503
// after 100 ms (a 502 is the charge failing, as when the fault also cut
// off the fake provider's connections). It returns every client's final
// answer per key, and how many of those were retried.
func faultStorm(t *testing.T, baseURL, prefix string, keys, dups int) ([][]stormResponse, int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	answers := make([][]stormResponse, keys)
	var mu sync.Mutex
	retried := 0
	var wg sync.WaitGroup
	for k := range keys {
		answers[k] = make([]stormResponse, dups)
		for d := range dups {
			wg.Go(func() {
				for try := 0; ; try++ {
					resp, _, err := postUntilDone(client, baseURL, faultKey(prefix, k), faultBody(k))
					if err != nil {
						t.Errorf("key %d: %v", k, err)
						return
					}
					if !slices.Contains(retriedStatuses, resp.status) || try == 300 {
						answers[k][d] = resp
						return
					}
					mu.Lock()
					retried++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	return answers, retried
}

// requireOncePerKey requires, for each key, exactly one fresh 201 and every
// other answer a replay of it.
func requireOncePerKey(t *testing.T, answers [][]stormResponse) {
	t.Helper()
	for k, got := range answers {
		var fresh []stormResponse
		for _, a := range got {
			if !a.replayed {
				fresh = append(fresh, a)
			}
		}
		require.Len(t, fresh, 1, "key %d: fresh answers, want exactly one: %+v", k, got)
		require.Equal(t, http.StatusCreated, fresh[0].status, "key %d: %s", k, fresh[0].body)
		for _, a := range got {
			require.Equal(t, fresh[0].stormContent, a.stormContent, "key %d: a replay differs from the fresh answer", k)
		}
	}
}

// killHolder SIGKILLs the worker that holds the request postTracked sent
// (first, holder), requires that the request's client gets no answer, and
// returns the killed worker's pid.
func killHolder(t *testing.T, p *exampleProc, first <-chan error, holder func() int) int {
	t.Helper()
	killed := holder()
	p.Kill(killed)
	require.Error(t, <-first, "the client of the killed worker gets no answer")
	return killed
}

// requireKilledRunTakenOver posts a payment to p, whose workers serve a
// plain store with a lease shorter than the handler's delay, SIGKILLs the
// worker running it once the handler has recorded the payment (count
// counts a table's rows), and retries it (retryKilled): the run that took
// the key over finds the killed run's payment by its ledger key and answers
// with it, records no other, and sends the provider the killed run's key.
func requireKilledRunTakenOver(t *testing.T, p *exampleProc, count func(t *testing.T, table, where string) int) {
	t.Helper()
	first, holder := postTracked(t, p, faultKey("killed", 0), faultBody(0))
	require.Eventually(t, func() bool { return count(t, "payments", "") == 1 }, 30*time.Second, 20*time.Millisecond,
		"the first request's handler recorded its payment")
	paid := paymentIDs(t, p.URL)
	waitProviderKeys(t, p, 1)
	retried := retryKilled(t, p, killHolder(t, p, first, holder))
	assert.Equal(t, paid, paymentIDs(t, p.URL), "the killed run's payment and no other")
	assert.Contains(t, retried.body, paid[0], "the retry answers with the killed run's payment")
	keys := waitProviderKeys(t, p, 2)
	assert.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1], "the run that took the key over sends the provider the killed run's key")
}

// retryKilled sends the killed request (key 0 of the prefix "killed")
// again from 10 clients at once, requires that it runs once, on a worker
// other than killed, and that every client gets that one answer, and
// returns it.
func retryKilled(t *testing.T, p *exampleProc, killed int) stormResponse {
	t.Helper()
	answers, _ := faultStorm(t, p.URL, "killed", 1, 10)
	requireOncePerKey(t, answers)
	assert.NotEqual(t, fmt.Sprint(killed), answers[0][0].worker)
	return answers[0][0]
}

// requireChaosSurvived has 60 keys x 5 concurrent duplicates sent to p's
// four workers while kills of them are SIGKILLed at random, one every
// interval; the supervisor restarts them. The clients retry as real
// clients do: after a transport error, a 500, 502 or 503 and a 409. At the end
// the ledger holds exactly one payment per key (each key posts an amount
// of its own), each the one its clients were answered with (paymentsOf
// reads the ledger), every key has one completed record (count reads a
// table), and all of a key's answers are identical. A run's answers may
// all be replays: a worker can die after its commit and before its
// response.
func requireChaosSurvived(t *testing.T, p *exampleProc, kills int, interval time.Duration,
	paymentsOf func(t *testing.T, amount int) []string, count func(t *testing.T, table, where string) int) {
	t.Helper()
	const keys, dups = 60, 5
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	deadline := time.Now().Add(45 * time.Second)
	answers := make([][]chaosAnswer, keys)
	var clients sync.WaitGroup
	launched := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(launched)
		// The keys start 60 ms apart, so that the kills below meet
		// requests of every stage.
		for k := range keys {
			answers[k] = make([]chaosAnswer, dups)
			for d := range dups {
				clients.Go(func() {
					answers[k][d] = postUntilCreated(client, p.URL, faultKey("chaos", k), faultBody(k), deadline)
				})
			}
			time.Sleep(60 * time.Millisecond)
		}
	}()

	killed := p.killAtRandom(kills, interval)
	<-launched
	clients.Wait()
	t.Logf("chaos: %d keys x %d duplicates in %v, workers killed: %v", keys, dups, time.Since(began).Round(time.Millisecond), killed)

	retried := map[string]int{}
	for k, got := range answers {
		fresh := 0
		for _, a := range got {
			require.NoError(t, a.err, "key %d", k)
			require.Equal(t, got[0].stormContent, a.stormContent, "key %d: the answers differ", k)
			if !a.replayed {
				fresh++
			}
			for what, n := range a.retried {
				retried[what] += n
			}
		}
		assert.LessOrEqual(t, fresh, 1, "key %d: fresh (not replayed) answers", k)
		var paid payment
		require.NoError(t, json.Unmarshal([]byte(got[0].body), &paid), "key %d", k)
		assert.Equal(t, 100+k, paid.Amount, "key %d", k)
		assert.Equal(t, []string{paid.ID}, paymentsOf(t, 100+k),
			"key %d: the ledger holds one payment of its amount, the one its clients were answered with", k)
	}
	assert.Equal(t, keys, count(t, "payments", ""), "one payment per key")
	assert.Equal(t, keys, count(t, "idempotency_keys", "state = 2"), "one completed record per key")
	t.Logf("chaos: retried %v", retried)
	assert.Positive(t, retried["transport error"], "no request was cut off by a kill")
	p.waitWorkers(4)
}
