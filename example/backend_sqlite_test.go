package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sqlitestore "github.com/seed43327c4c/idempotency/store_sqlite"
)

// sqliteFile is the SQLite file of an example under test, in the test's
// temporary directory, which the test reads through a handle of its own.
type sqliteFile struct {
	path string
	db   *sql.DB
}

func newSQLiteFile(t *testing.T) *sqliteFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idempotency.db")
	db, err := sqlitestore.Open(context.Background(), path, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &sqliteFile{path: path, db: db}
}

// count returns how many rows of table match where (all rows if empty), or
// 0 while the table does not exist yet.
func (f *sqliteFile) count(t *testing.T, table, where string) int {
	t.Helper()
	if where == "" {
		where = "true"
	}
	var n int
	err := f.db.QueryRow(`SELECT count(*) FROM ` + table + ` WHERE ` + where).Scan(&n)
	if err != nil && !tableMissing(f.db, table) {
		require.NoError(t, err)
	}
	return n
}

func tableMissing(db *sql.DB, table string) bool {
	var n int
	return db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, table).Scan(&n) == nil && n == 0
}

// TestExampleStormSQLite: with -workers 4 and no -store, the workers share
// records and the ledger through one SQLite file; 100 keys x 20 concurrent
// duplicates give exactly one payment per key, and every duplicate the
// same answer: only 201s and 409s (see runStorm). In the transactional
// mode (the default) each payment holds the file's write lock through its
// -delay, so the payments are made one at a time and most claims of new
// keys cannot get the file within their 5 s: they are answered 409 too.
func TestExampleStormSQLite(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tx", []string{"-delay", "300ms"}},
		{"plain", []string{"-delay", "300ms", "-sqlite-tx=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newSQLiteFile(t)
			p := startExample(t, append([]string{"-sqlite-path", f.path, "-workers", "4"}, c.args...)...)
			firstLine, _, _ := strings.Cut(p.Log(), "\n")
			assert.Contains(t, firstLine, "store=sqlite", "with several workers the example defaults to SQLite, and its first log line says so")
			requireSharedStorm(t, p, f.count)
		})
	}
}

// TestExampleSQLiteShortLeaseStorm: four workers in the transactional mode
// with a lease shorter than the time each payment holds the file's write
// lock (-lease 300ms -delay 700ms), so that claims get 150 ms for the file
// and the leases of requests waiting for it lapse; 40 accounts, each with 6
// clients sending one payment at once and retrying each 409 every 20 ms
// (see runAccountStorm). Every client gets the same 201, nothing else, and
// each account is paid once.
func TestExampleSQLiteShortLeaseStorm(t *testing.T) {
	f := newSQLiteFile(t)
	p := startExample(t, "-store", "sqlite", "-sqlite-path", f.path, "-workers", "4", "-lease", "300ms", "-delay", "700ms")
	runAccountStorm(t, p.URL, 40, 6, 20*time.Millisecond)
	assert.Equal(t, 40, f.count(t, "payments", ""))
}

// TestExampleSQLitePlainWorkerKilled: with the plain SQLite store
// (-sqlite-tx=false), the worker running a request is SIGKILLed after it
// recorded the payment, while it holds the key. Its duplicates get 409
// until its lease ends; then exactly one of them takes the key over, under
// the next fencing number, and runs the handler, which answers with the
// killed run's payment, and all get that one answer.
func TestExampleSQLitePlainWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	f := newSQLiteFile(t)
	p := startExample(t, "-store", "sqlite", "-sqlite-tx=false", "-sqlite-path", f.path,
		"-workers", "2", "-delay", "2s", "-lease", "1s")
	requireKilledRunTakenOver(t, p, f.count)
	assert.Equal(t, 1, f.count(t, "idempotency_keys", ""), "one record")
	assert.Equal(t, 1, f.count(t, "idempotency_keys", "state = 2 AND fence = 2"), "completed, taken over once")
	p.waitWorkers(2)
}

// TestExampleSQLiteTxWorkerKilled: the worker running a request is
// SIGKILLed after the handler inserted the payment and before the commit
// (during -delay). The payment was written in the request's transaction,
// which SQLite drops with the process: no payment is left, and the claim,
// committed apart, holds the key until its lease lapses. The client's
// retry, sent by several clients at once, creates exactly one payment.
func TestExampleSQLiteTxWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	f := newSQLiteFile(t)
	p := startExample(t, "-store", "sqlite", "-sqlite-path", f.path, "-workers", "2", "-delay", "2s", "-lease", "1s")

	first, holder := postTracked(t, p, faultKey("killed", 0), faultBody(0))
	waitProviderKeys(t, p, 1) // logged once the payment is inserted
	assert.Zero(t, f.count(t, "payments", ""), "the payment is not visible before the commit")
	assert.Equal(t, 1, f.count(t, "idempotency_keys", "state = 1"), "the claim is")

	killed := killHolder(t, p, first, holder)
	assert.Zero(t, f.count(t, "payments", ""), "the killed run left no payment")
	retryKilled(t, p, killed)
	assert.Equal(t, 1, f.count(t, "payments", ""), "exactly one payment: the retry's")
	keys := waitProviderKeys(t, p, 2)
	assert.Equal(t, keys[0], keys[1], "the retry sends the provider the killed run's key")
	assert.Equal(t, 1, f.count(t, "idempotency_keys", "state = 2 AND fence = 2"), "completed, taken over once")
	p.waitWorkers(2)
}

// TestExampleSQLiteTxChaos: four workers in transactional mode on one
// SQLite file serve 60 keys x 5 concurrent duplicates while workers are
// SIGKILLed at random, one every 500 ms, eight times (see
// requireChaosSurvived). Each payment holds the file's write lock through
// its 20 ms -delay. A killed worker's keys are free once their 10 s lease
// lapses.
func TestExampleSQLiteTxChaos(t *testing.T) {
	f := newSQLiteFile(t)
	p := startExample(t, "-store", "sqlite", "-sqlite-path", f.path, "-workers", "4", "-delay", "20ms", "-lease", "10s")
	requireChaosSurvived(t, p, 8, 500*time.Millisecond, f.paymentsOf, f.count)
}

// paymentsOf returns the ids of the payments of amount in the ledger.
func (f *sqliteFile) paymentsOf(t *testing.T, amount int) []string {
	t.Helper()
	rows, err := f.db.Query(`SELECT id FROM payments WHERE amount = ?`, amount)
	require.NoError(t, err)
	defer rows.Close()
	return readJobs(t, rows)
}

// TestSQLiteFileThatCannotServeFailsStartUp: a missing directory or a file
// that is not a database stops the start-up with an error naming the flag
// and the cause.
func TestSQLiteFileThatCannotServeFailsStartUp(t *testing.T) {
	notADatabase := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(notADatabase, []byte("these are not the records you are looking for"), 0o600))
	for _, c := range []struct {
		name, path, want string
	}{
		{"missing directory", filepath.Join(t.TempDir(), "missing", "idempotency.db"), "does not exist"},
		{"not a database", notADatabase, "not a database"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := openBackend(context.Background(), config{store: "sqlite", sqlitePath: c.path}, time.Minute)
			require.ErrorContains(t, err, "-sqlite-path: sqlitestore: open "+c.path)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestSQLiteLedgerKeepsAccountsApart: each account lists its own payments,
// oldest first, and one without any gets an empty list.
func TestSQLiteLedgerKeepsAccountsApart(t *testing.T) {
	_, led, closeBackend, err := openBackend(context.Background(),
		config{store: "sqlite", sqlitePath: filepath.Join(t.TempDir(), "idempotency.db")}, time.Minute)
	require.NoError(t, err)
	defer closeBackend()
	ctx := context.Background()
	var alice []payment
	for amount := range 3 {
		p, err := led.Create(ctx, "alice-"+strconv.Itoa(amount), "alice", 100+amount, "EUR")
		require.NoError(t, err)
		alice = append(alice, p)
		_, err = led.Create(ctx, "bob-"+strconv.Itoa(amount), "bob", 200+amount, "USD")
		require.NoError(t, err)
	}
	got, err := led.List(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, alice, got)
	got, err = led.List(ctx, "carol")
	require.NoError(t, err)
	assert.Equal(t, []payment{}, got)
}

// TestExampleSQLiteSealed is issue 38's target on SQLite, over the raw
// rows of the idempotency table (see requireSealedAtRest).
func TestExampleSQLiteSealed(t *testing.T) {
	f := newSQLiteFile(t)
	requireSealedAtRest(t, func(ring string) *exampleProc {
		return startExample(t, "-store", "sqlite", "-sqlite-path", f.path, "-seal-keys", ring)
	}, func() [][]byte { return rawRows(t, f.db, "idempotency_keys") },
		func() int { return f.count(t, "payments", "") })
}
