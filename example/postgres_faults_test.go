package main

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamplePostgresConnectionsTerminated: the store's connections are
// terminated (pg_terminate_backend) while a storm runs, then cut off for a
// while. Each protected request runs in a transaction (the store is in
// transactional mode), so a termination aborts the requests then running:
// their payments and claims are rolled back together, and their clients
// get 500 or 503 and retry. While Postgres cannot be reached every request
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
	t.Logf("mid-run: %d connections terminated, %d answers 500 or 503 retried", n, retried)

	// Cut off: the role may not log in, and its connections are ended.
	db.exec(t, "ALTER ROLE "+db.role+" NOLOGIN")
	require.Eventually(t, func() bool { return db.terminate(t) == 0 }, 10*time.Second, 50*time.Millisecond)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	for k := range 10 {
		req, err := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(faultBody(k)))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", faultKey("out", k))
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

// TestExamplePostgresPlainWorkerKilled: with the plain Postgres store
// (-postgres-tx=false), the worker running a request is SIGKILLed after it
// recorded the payment, while it holds the key. Its duplicates get 409
// until its lease ends; then exactly one of them takes the key over and
// runs the handler, and all get that one answer. The killed run's payment
// stays: only the transactional mode undoes a handler's writes that were
// never recorded as done.
func TestExamplePostgresPlainWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-postgres-tx=false", "-database-url", db.URL,
		"-workers", "2", "-delay", "2s", "-lease", "1s")

	first, holder := postTracked(t, p, faultKey("killed", 0), faultBody(0))
	require.Eventually(t, func() bool { return db.count(t, "payments", "") == 1 }, 30*time.Second, 20*time.Millisecond,
		"the first request's handler recorded its payment")
	killed := holder()
	p.Kill(killed)
	require.Error(t, <-first, "the client of the killed worker gets no answer")

	answers, _ := faultStorm(t, p.URL, "killed", 1, 10)
	requireOncePerKey(t, answers)
	assert.NotEqual(t, fmt.Sprint(killed), answers[0][0].worker)
	assert.Equal(t, 2, db.count(t, "payments", ""), "the killed run's payment and exactly one more")
	assert.Equal(t, 1, db.count(t, "idempotency_keys", "state = 2"))
	p.waitWorkers(2)
}

func faultKey(prefix string, k int) string { return fmt.Sprintf("%s-%d", prefix, k) }
func faultBody(k int) string               { return fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+k) }

// faultStorm sends dups concurrent POST /payments for each of keys keys
// (faultKey(prefix, k) with faultBody(k)), each client retrying as a real
// client would: a 409 after Retry-After (postUntilDone), a 500 or 503 after
// 100 ms. It returns every client's final answer per key, and how many
// 500s and 503s were retried.
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
					if (resp.status != http.StatusInternalServerError && resp.status != http.StatusServiceUnavailable) || try == 300 {
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
