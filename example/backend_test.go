package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentServer accepts connections on a loopback port and never answers
// them, as a database host whose server hangs does.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestBackendThatNeverAnswersFailsStartUp: a Redis, Postgres or MySQL server that
// accepts connections and never replies makes start-up fail after the
// timeout, naming the backend, instead of waiting forever.
func TestBackendThatNeverAnswersFailsStartUp(t *testing.T) {
	addr := silentServer(t)
	for _, cfg := range []config{
		{store: "postgres", databaseURL: "postgres://postgres@" + addr + "/test?sslmode=disable", postgresTx: true},
		{store: "redis", redisURL: "redis://" + addr + "/0"},
		{store: "mysql", mysqlDSN: "root@tcp(" + addr + ")/test", mysqlTx: true},
	} {
		t.Run(cfg.store, func(t *testing.T) {
			started := time.Now()
			_, _, _, err := openBackend(context.Background(), cfg, 300*time.Millisecond)
			require.ErrorContains(t, err, "the "+cfg.store+" backend did not answer within 300ms")
			require.Less(t, time.Since(started), 3*time.Second, "%s: start-up gave up long after its timeout", cfg.store)
		})
	}
}

// TestLedgerWriteRepeated: a payment's write sent again under its ref, and
// sent by many goroutines at once, records one payment, which every send
// returns; another ref is another payment. Each backend writes to its real
// server, SQLite and Postgres into a table made before payments had refs.
func TestLedgerWriteRepeated(t *testing.T) {
	for _, backend := range []string{"memory", "sqlite", "postgres", "redis", "mysql"} {
		t.Run(backend, func(t *testing.T) {
			led, account, old := ledgerUnderTest(t, backend)
			ctx := t.Context()
			sent := make([]payment, 10)
			var wg sync.WaitGroup
			for i := range sent {
				wg.Go(func() {
					p, err := led.Create(ctx, "ref-1", account, 700, "EUR")
					assert.NoError(t, err)
					sent[i] = p
				})
			}
			wg.Wait()
			again, err := led.Create(ctx, "ref-1", account, 700, "EUR")
			require.NoError(t, err)
			for _, p := range sent {
				require.Equal(t, again, p, "every send returns the one payment")
			}
			other, err := led.Create(ctx, "ref-2", account, 900, "EUR")
			require.NoError(t, err)
			got, err := led.List(ctx, account)
			require.NoError(t, err)
			assert.Equal(t, append(old, again, other), got)
		})
	}
}

// TestLedgerCount: each backend counts every sighting of an id in each
// tally, many at once included, lists a tally's ids in order, and keeps
// the tallies apart. The provider's tally is counted outside any request,
// in transactional mode too.
func TestLedgerCount(t *testing.T) {
	for _, backend := range []string{"memory", "sqlite", "postgres", "redis", "mysql"} {
		t.Run(backend, func(t *testing.T) {
			led, _, _ := ledgerUnderTest(t, backend)
			ctx := t.Context()
			for _, tl := range []tally{webhookEvents, providerCharges} {
				empty, err := led.Counts(ctx, tl)
				require.NoError(t, err)
				require.Equal(t, []eventCount{}, empty, tl.name)
			}
			counts := make([]int, 10)
			var wg sync.WaitGroup
			for i := range counts {
				wg.Go(func() {
					n, err := led.Count(ctx, providerCharges, "key_b")
					assert.NoError(t, err)
					counts[i] = n
				})
			}
			wg.Wait()
			assert.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, counts, "each call counted once")
			n, err := led.Count(ctx, providerCharges, "key_a")
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			charges, err := led.Counts(ctx, providerCharges)
			require.NoError(t, err)
			assert.Equal(t, []eventCount{{ID: "key_a", Count: 1}, {ID: "key_b", Count: 10}}, charges)
			events, err := led.Counts(ctx, webhookEvents)
			require.NoError(t, err)
			assert.Equal(t, []eventCount{}, events, "a provider's call is no webhook event")
		})
	}
}

// ledgerUnderTest opens backend's ledger, on its real server, and returns
// it with an account of its own and that account's payments from before
// refs. Everything it writes is removed when the test ends.
func ledgerUnderTest(t *testing.T, backend string) (ledger, string, []payment) {
	t.Helper()
	cfg := config{store: backend}
	account := "sk_test_" + newPaymentID()
	old := []payment{}
	// oldTable creates the table as the example did before refs, with
	// more columns if the backend had them, and one payment of account.
	oldTable := func(table, more string, exec func(sql string)) {
		exec(`CREATE TABLE ` + table + ` (id text PRIMARY KEY, account text NOT NULL,
amount integer NOT NULL CHECK (amount > 0), currency text NOT NULL` + more + `)`)
		exec(`INSERT INTO ` + table + ` (id, account, amount, currency) VALUES ('pay_old', '` + account + `', 500, 'EUR')`)
		old = append(old, payment{ID: "pay_old", Amount: 500, Currency: "EUR"})
	}
	switch backend {
	case "sqlite":
		f := newSQLiteFile(t)
		oldTable("payments", "", func(sql string) {
			_, err := f.db.Exec(sql)
			require.NoError(t, err, sql)
		})
		cfg.sqlitePath = f.path
	case "postgres":
		db := newPGTestDB(t)
		oldTable(db.schema+".payments", ", created_at timestamptz NOT NULL DEFAULT now()", func(sql string) { db.exec(t, sql) })
		db.exec(t, "ALTER TABLE "+db.schema+".payments OWNER TO "+db.role)
		cfg.databaseURL = db.URL
	case "mysql":
		cfg.mysqlDSN = newMySQLTestDB(t).DSN
	case "redis":
		cfg.redisURL = redisURL(t)
		t.Cleanup(func() { removeLedgerKeys(t, cfg, account) })
	}
	_, led, closeBackend, err := openBackend(t.Context(), cfg, time.Minute)
	require.NoError(t, err)
	t.Cleanup(closeBackend)
	return led, account, old
}
