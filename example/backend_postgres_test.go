package main

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleStormPostgres: four worker processes share records and the
// ledger through Postgres; 100 keys x 20 concurrent duplicates give exactly
// one payment per key, and every duplicate the same answer.
func TestExampleStormPostgres(t *testing.T) {
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "4", "-delay", "300ms")
	requireSharedStorm(t, p, db.count)
}

// TestExamplePostgresConnectionsTerminated: the store's connections are
// terminated (pg_terminate_backend) while a storm runs, then cut off for a
// while. Each protected request runs in a transaction (the store is in
// transactional mode), so a termination aborts the requests then running:
// their payments and claims are rolled back together, and their clients
// get 500, 502 or 503 and retry. While Postgres cannot be reached every request
// gets 503 and no handler runs (fail closed); once it can, the same
// requests succeed, and every key ends with exactly one payment.
func TestExamplePostgresConnectionsTerminated(t *testing.T) {
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "2", "-delay", "300ms")

	// Mid-run: every connection of the service terminated, terminations
	// rounds 700 ms apart; a request holds its connection for over 300 ms,
	// so some are aborted in each round and the others can finish.
	const terminations = 6
	stop, killed := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { killed <- n }()
		for range terminations {
			select {
			case <-stop:
				return
			case <-time.After(700 * time.Millisecond):
				n += db.terminate(t)
			}
		}
	}()
	answers, retried := faultStorm(t, p.URL, "mid", 40, 10)
	close(stop)
	n := <-killed
	requireOncePerKey(t, answers)
	assert.Positive(t, n, "no connection was terminated")
	assert.Equal(t, 40, db.count(t, "payments", ""), "one payment per key")
	t.Logf("mid-run: %d connections terminated, %d answers 500, 502 or 503 retried", n, retried)

	// Cut off: the role may not log in, and its connections are ended.
	db.exec(t, "ALTER ROLE "+db.role+" NOLOGIN")
	require.Eventually(t, func() bool { return db.terminate(t) == 0 }, 10*time.Second, 50*time.Millisecond)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	for k := range 10 {
		req, err := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(faultBody(k)))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", faultKey("out", k))
		asCaller(req, testAccount)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "fail closed")
		assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	}
	assert.Equal(t, 40, db.count(t, "payments", ""), "no handler ran while the store was unreachable")

	// Back: the same keys, retried by several clients each, run once.
	db.exec(t, "ALTER ROLE "+db.role+" LOGIN")
	answers, _ = faultStorm(t, p.URL, "out", 10, 3)
	requireOncePerKey(t, answers)
	assert.Equal(t, 50, db.count(t, "payments", ""), "one payment per key")
}

// TestExamplePostgresWorkerKilled: the worker running a request is
// SIGKILLed after it recorded the payment, while it holds the key, in both
// modes. Its duplicates get 409 until its lease ends; then exactly one of
// them takes the key over and runs the handler, and all get that one
// answer, the killed run's payment (see requireKilledRunTakenOver). In
// the plain mode (-postgres-tx=false) the killed run's payment stays
// because the ledger wrote it on its own; in the transactional mode
// because its step "ledger" committed it with its recovery point, which
// the run that took over gets back instead of writing again.
func TestExamplePostgresWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	for _, mode := range []string{"-postgres-tx=false", "-postgres-tx=true"} {
		t.Run(mode, func(t *testing.T) {
			db := newPGTestDB(t)
			p := startExample(t, "-store", "postgres", mode, "-database-url", db.URL,
				"-workers", "2", "-delay", "2s", "-lease", "1s")
			requireKilledRunTakenOver(t, p, db.count)
			assert.Equal(t, 1, db.count(t, "idempotency_keys", "state = 2"))
			p.waitWorkers(2)
		})
	}
}

// TestExamplePostgresTxChaos: four workers in transactional mode serve 60
// keys x 5 concurrent duplicates while workers are SIGKILLed at random, one
// every 700 ms, five times (see requireChaosSurvived).
func TestExamplePostgresTxChaos(t *testing.T) {
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "4", "-delay", "300ms")
	requireChaosSurvived(t, p, 5, 700*time.Millisecond, db.paymentsOf, db.count)
}

// TestExamplePostgresSealed is issue 38's target on Postgres, over the raw
// rows of the idempotency table (see requireSealedAtRest).
func TestExamplePostgresSealed(t *testing.T) {
	db := newPGTestDB(t)
	requireSealedAtRest(t, func(ring string) *exampleProc {
		return startExample(t, "-store", "postgres", "-database-url", db.URL, "-seal-keys", ring)
	}, func() [][]byte { return db.rawRows(t, "idempotency_keys") },
		func() int { return db.count(t, "payments", "") })
}
