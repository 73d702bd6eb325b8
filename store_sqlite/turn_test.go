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

	"github.com/stretchr/testify/assert"
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

// TestTurnGoesToOwnersFirst: a statement of an owner that waits for the
// turn gets it before the claims that waited longer, and a waiter whose
// context ends leaves the queue without holding the turn up.
func TestTurnGoesToOwnersFirst(t *testing.T) {
	var tn turn
	require.NoError(t, tn.take(context.Background(), false))
	order := make(chan string, 4)
	// queue starts a waiter, the waiting-th in line, that writes its name
	// to order once it holds the turn.
	queue := func(name string, owner bool, waiting int) {
		t.Helper()
		go func() {
			if err := tn.take(context.Background(), owner); err == nil {
				order <- name
				tn.give()
			}
		}()
		require.Eventually(t, func() bool {
			tn.mu.Lock()
			defer tn.mu.Unlock()
			return len(tn.owners)+len(tn.others) == waiting
		}, time.Second, time.Millisecond)
	}
	queue("claim 1", false, 1)
	queue("claim 2", false, 2)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- tn.take(ctx, true) }()
	require.Eventually(t, func() bool {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		return len(tn.owners) == 1
	}, time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	queue("owner", true, 3)
	tn.give()
	assert.Equal(t, []string{"owner", "claim 1", "claim 2"}, []string{<-order, <-order, <-order})
}

// stormOptIn names the variable that runs TestDuplicateStormLeavesRenewalsOnTime.
const stormOptIn = "SQLITESTORE_STORM"

// TestDuplicateStormLeavesRenewalsOnTime: while duplicates of keys in
// flight keep every worker's store busy with claims, each owner's renewal
// still reaches the file within its lease, so no account is paid twice.
// It runs when stormOptIn is set: on a machine whose cores are taken by
// other work, or under the race detector, a 300 ms lease also lapses for
// want of CPU.
func TestDuplicateStormLeavesRenewalsOnTime(t *testing.T) {
	if os.Getenv(stormOptIn) == "" {
		t.Skipf("set %s=1 to run the duplicate storm (4 processes, about 10 s, on an otherwise idle machine)", stormOptIn)
	}
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
