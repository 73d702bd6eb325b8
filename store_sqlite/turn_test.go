package sqlitestore

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// stormEnv runs this test binary as a worker of TestDuplicateStormLeavesRenewalsOnTime:
// its value is the database file the worker serves (see stormWorker).
const stormEnv = "SQLITESTORE_TEST_STORM_FILE"

// The storm: stormWorkers processes on one file, each a middleware with a
// lease of stormLease in front of a handler that runs for stormHandler, and
// stormClients clients per account sending one key each, all retrying a 409
// every stormRetry, for stormAccounts accounts in each of stormRounds rounds.
const (
	stormWorkers  = 4
	stormLease    = 300 * time.Millisecond
	stormHandler  = 700 * time.Millisecond
	stormAccounts = 40
	stormClients  = 6
	stormRetry    = 20 * time.Millisecond
	stormRounds   = 5
)

// TestDuplicateStormLeavesRenewalsOnTime: while duplicates of keys in
// flight keep every worker's store busy with claims, each owner's renewal
// still reaches the file within its lease, so no account is paid twice.
func TestDuplicateStormLeavesRenewalsOnTime(t *testing.T) {
	path := testFile(t)
	newTestStoreOn(t, path)
	var (
		mu   sync.Mutex
		runs = map[string]int{} // handler runs by key, of every worker
	)
	var addrs []string
	for range stormWorkers {
		cmd, stdin, stdout := startChild(t, stormEnv+"="+path)
		lines := bufio.NewScanner(stdout)
		require.True(t, lines.Scan(), "a storm worker did not start")
		addr, ok := strings.CutPrefix(lines.Text(), "listening ")
		require.True(t, ok, "a storm worker's first line: %q", lines.Text())
		addrs = append(addrs, addr)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for lines.Scan() {
				if key, ok := strings.CutPrefix(lines.Text(), "ran "); ok {
					mu.Lock()
					runs[key]++
					mu.Unlock()
				}
			}
		}()
		t.Cleanup(func() {
			_ = stdin.Close()
			<-done
			require.NoError(t, cmd.Wait(), "storm worker")
		})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: stormAccounts * stormClients}}
	defer client.CloseIdleConnections()
	var twice []string // the keys of accounts paid more than once, and how often
	for round := range stormRounds {
		var wg sync.WaitGroup
		for account := range stormAccounts {
			key := fmt.Sprintf("round-%d-account-%d", round, account)
			for range stormClients {
				wg.Go(func() { payUntilAnswered(t, client, addrs, key) })
			}
		}
		wg.Wait()
		mu.Lock()
		for account := range stormAccounts {
			key := fmt.Sprintf("round-%d-account-%d", round, account)
			if runs[key] != 1 {
				twice = append(twice, fmt.Sprintf("%s ran %d times", key, runs[key]))
			}
		}
		mu.Unlock()
	}
	require.Empty(t, twice, "%d of %d accounts paid more than once", len(twice), stormAccounts*stormRounds)
}

// payUntilAnswered sends key's payment to a random worker of addrs until
// one answers 201, waiting stormRetry after each 409 or 503.
func payUntilAnswered(t *testing.T, client *http.Client, addrs []string, key string) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addrs[rand.IntN(len(addrs))]+"/pay", strings.NewReader(`{}`))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated:
			return
		case http.StatusConflict, http.StatusServiceUnavailable:
			time.Sleep(stormRetry)
		default:
			t.Errorf("%s: status %d", key, resp.StatusCode)
			return
		}
	}
	t.Errorf("%s: no payment within 30 s", key)
}

// stormWorker serves the storm's middleware on path, on a port of its own
// that its first line of stdout names, and writes "ran KEY" for each run
// of its handler, until stdin is closed.
func stormWorker(path string) error {
	db, err := Open(context.Background(), path, 0)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS storm_payments (key TEXT NOT NULL)`); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var out sync.Mutex
	pay := func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		out.Lock()
		fmt.Println("ran", key)
		out.Unlock()
		time.Sleep(stormHandler)
		if err := insertPayment(r.Context(), db, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	mw := idempotency.New(idempotency.WithStore(New(db)), idempotency.WithLease(stormLease),
		idempotency.WithRoute(func(r *http.Request) string { return r.URL.Path }), // one route whatever the worker's port
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	srv := &http.Server{Handler: mw(http.HandlerFunc(pay))}
	go func() { _ = srv.Serve(ln) }()
	out.Lock()
	fmt.Println("listening", ln.Addr())
	out.Unlock()
	_, _ = io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// insertPayment writes the ledger row of the payment of key, as a handler
// writes its own data to the file the store shares.
func insertPayment(ctx context.Context, db *sql.DB, key string) error {
	_, err := db.ExecContext(ctx, `INSERT INTO storm_payments (key) VALUES (?)`, key)
	return err
}
