// Package waitbench measures, through the middleware on any store, how
// soon a request waiting for its duplicate in flight (idempotency.WithWait)
// is answered once that duplicate completes.
package waitbench

import (
	crand "crypto/rand"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

const (
	// maxWait is the waiting request's WithWait: far longer than any
	// answer takes, so that every round ends in a replay.
	maxWait = 10 * time.Second
	// settleMin and settleMax bound how long the duplicate waits before the
	// first request completes, drawn at random so that the completion falls
	// anywhere in a polling waiter's schedule.
	settleMin = 20 * time.Millisecond
	settleMax = 80 * time.Millisecond
)

// Run measures, in each iteration of b, a first request whose handler
// blocks, a duplicate that waits for it, then the handler's return. It
// reports the median and 90th percentile, in milliseconds, from that
// return to the duplicate's replay, and fails b if the duplicate is
// answered anything else.
func Run(b *testing.B, s store.Store) {
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(maxWait))
	prefix := crand.Text()
	var latencies []time.Duration
	round := 0
	for b.Loop() {
		round++
		latencies = append(latencies, measureRound(b, mw, prefix+"-"+strconv.Itoa(round)))
	}
	slices.Sort(latencies)
	b.ReportMetric(millis(latencies[len(latencies)/2]), "ms-median")
	b.ReportMetric(millis(latencies[len(latencies)*9/10]), "ms-p90")
}

// measureRound runs one round under key and returns how long after the
// first request's handler returned its duplicate was answered.
func measureRound(b *testing.B, mw func(http.Handler) http.Handler, key string) time.Duration {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var returned time.Time
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(started) })
		<-release
		w.WriteHeader(http.StatusCreated)
		returned = time.Now()
	}))
	var running sync.WaitGroup
	running.Go(func() { h.ServeHTTP(httptest.NewRecorder(), newRequest(key)) })
	<-started

	var answered time.Time
	waiter := httptest.NewRecorder()
	running.Go(func() {
		h.ServeHTTP(waiter, newRequest(key))
		answered = time.Now()
	})
	time.Sleep(settleMin + rand.N(settleMax-settleMin))
	close(release)
	running.Wait()
	if waiter.Code != http.StatusCreated || waiter.Header().Get("Idempotent-Replayed") != "true" {
		b.Fatalf("the waiting duplicate was answered %d (Idempotent-Replayed %q), not the replay",
			waiter.Code, waiter.Header().Get("Idempotent-Replayed"))
	}
	return answered.Sub(returned)
}

// newRequest returns a POST under key, the same for every duplicate.
func newRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	return r
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
