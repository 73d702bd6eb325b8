// Package stalltest stalls the network between two workers and their
// store, and checks that the middleware's store timeout bounds every
// answer. The Redis and Postgres store tests run it against their own
// servers.
package stalltest

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
)

const (
	storeTimeout = 2 * time.Second
	// lease outlasts the stall, so that an outcome held up by it still
	// lands within the lease and a claim the stall held up holds its key
	// for the rest of the test.
	lease = 30 * time.Second
	stall = 15 * time.Second
	// arrival is how often a new payment is sent, whatever is still
	// unanswered.
	arrival = 200 * time.Millisecond
	// warmUp is how long the clients run before the stall, and after it.
	warmUp = 2 * time.Second
	// settle is how long after the stall goroutines and connections may
	// take to come back to their level before it.
	settle = 30 * time.Second
)

// Run puts a middleware on each of stores, whose connections all go
// through proxy, sends the same payments to both, and stalls proxy for a
// while. It fails t unless every request sent during the stall is answered
// within the store timeout + 1 s, no payment runs twice, a payment sent
// after the stall succeeds within 2 s of its end, and goroutines and proxy
// connections come back to their level before the stall (the stores' pools
// should be full from the start).
func Run(t *testing.T, proxy *tcpproxy.Proxy, stores [2]store.Store) {
	runs := &ledger{paid: make(map[string]int)}
	workers := [2]http.Handler{
		idempotency.New(idempotency.WithStore(stores[0]), idempotency.WithStoreTimeout(storeTimeout),
			idempotency.WithLease(lease), idempotency.WithErrorHandler(func(*http.Request, error) {}))(runs),
		idempotency.New(idempotency.WithStore(stores[1]), idempotency.WithStoreTimeout(storeTimeout),
			idempotency.WithLease(lease), idempotency.WithErrorHandler(func(*http.Request, error) {}))(runs),
	}
	load := newLoad(workers, rand.Text())
	load.run(warmUp)
	goroutines, conns := runtime.NumGoroutine(), proxy.Conns()

	stop := load.start()
	time.Sleep(warmUp / 2)
	proxy.Stall()
	stalled := time.Now() // a request sent from now on reaches the store only after the stall
	time.Sleep(stall)
	resumed := time.Now()
	proxy.Resume()
	time.Sleep(warmUp)
	stop()

	during := load.answers(func(a answer) bool { return !a.sent.Before(stalled) && a.sent.Before(resumed) })
	require.NotEmpty(t, during, "requests sent during the stall")
	took := make([]time.Duration, len(during))
	for i, a := range during {
		took[i] = a.took
	}
	slices.Sort(took)
	t.Logf("%d requests sent during the stall answered in: p50 %v, p99 %v, max %v; statuses %v",
		len(took), took[len(took)/2], took[len(took)*99/100], took[len(took)-1], statuses(during))
	assert.LessOrEqual(t, took[len(took)-1], storeTimeout+time.Second, "slowest answer to a request sent during the stall")

	assert.Empty(t, runs.twice(), "payments run twice")

	after := load.answers(func(a answer) bool { return !a.sent.Before(resumed) && a.status == http.StatusCreated })
	require.NotEmpty(t, after, "a payment sent after the stall succeeds")
	first := slices.MinFunc(after, func(a, b answer) int { return a.done().Compare(b.done()) })
	t.Logf("first success after the stall: %v after its end", first.done().Sub(resumed))
	assert.LessOrEqual(t, first.done().Sub(resumed), 2*time.Second, "first success after the stall")

	var nowGoroutines, nowConns int
	back := func() bool {
		nowGoroutines, nowConns = runtime.NumGoroutine(), proxy.Conns()
		return nowGoroutines <= goroutines && nowConns <= conns
	}
	for !back() && time.Since(resumed) < settle {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%v after the stall: %d goroutines (%d before), %d connections (%d before)",
		time.Since(resumed).Round(time.Millisecond), nowGoroutines, goroutines, nowConns, conns)
	assert.True(t, back(), "goroutines %d (before: %d), connections %d (before: %d), %v after the stall",
		nowGoroutines, goroutines, nowConns, conns, settle)
}

// ledger is the workers' handler: it pays each payment it is given, once
// per run, and answers 201.
type ledger struct {
	mu   sync.Mutex
	paid map[string]int // runs per payment
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.paid[r.Header.Get("Idempotency-Key")]++
	l.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	w.WriteHeader(http.StatusCreated)
}

// twice returns the payments run more than once.
func (l *ledger) twice() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	twice := make(map[string]int)
	for key, n := range l.paid {
		if n > 1 {
			twice[key] = n
		}
	}
	return twice
}

// answer is one request's answer.
type answer struct {
	sent   time.Time
	took   time.Duration
	status int
}

func (a answer) done() time.Time { return a.sent.Add(a.took) }

// load is the clients' requests to the workers.
type load struct {
	workers [2]http.Handler
	prefix  string
	round   atomic.Int64

	mu  sync.Mutex
	all []answer
}

func newLoad(workers [2]http.Handler, prefix string) *load {
	return &load{workers: workers, prefix: prefix}
}

// run sends for d, and returns once every request sent has its answer.
func (l *load) run(d time.Duration) {
	stop := l.start()
	time.Sleep(d)
	stop()
}

// start starts sending: every arrival, whatever is still unanswered, a
// new payment to both workers at once, then again to the waiting one as a
// retry. stop stops it and returns once every request sent has its
// answer.
func (l *load) start() (stop func()) {
	var wg sync.WaitGroup
	ticker := time.NewTicker(arrival)
	ended := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-ended:
				return
			case <-ticker.C:
			}
			key := l.prefix + "-" + strconv.FormatInt(l.round.Add(1), 10)
			wg.Go(func() {
				var pair sync.WaitGroup
				for _, worker := range l.workers {
					pair.Go(func() { l.send(worker, key) })
				}
				pair.Wait()
				l.send(l.workers[1], key)
			})
		}
	})
	return func() {
		ticker.Stop()
		close(ended)
		wg.Wait()
	}
}

// send sends payment key to worker and keeps its answer.
func (l *load) send(worker http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	sent := time.Now()
	worker.ServeHTTP(w, r)
	a := answer{sent: sent, took: time.Since(sent), status: w.Code}
	l.mu.Lock()
	l.all = append(l.all, a)
	l.mu.Unlock()
}

// answers returns the answers that keep reports true of.
func (l *load) answers(keep func(answer) bool) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var kept []answer
	for _, a := range l.all {
		if keep(a) {
			kept = append(kept, a)
		}
	}
	return kept
}

// statuses counts as by status, for the log.
func statuses(as []answer) string {
	count := make(map[int]int)
	for _, a := range as {
		count[a.status]++
	}
	return fmt.Sprint(count)
}
