package redisstore_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
)

// replayedPayment is the handler of BenchmarkMiddlewareReplay: it answers
// 201 with benchResponse, as a small JSON API does.
var replayedPayment = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	for name, values := range benchResponse.Header {
		w.Header()[name] = values
	}
	w.WriteHeader(benchResponse.Status)
	_, _ = w.Write(benchResponse.Body)
})

// BenchmarkMiddlewareReplay measures replays of one completed key through
// the middleware on the Redis store, from 32 goroutines: b.N requests each
// to the bare handler, to the middleware without the replay cache, and to
// the middleware with it (WithReplayCache), in interleaved rounds so that
// a busy moment of the machine weighs on all three alike. It reports each
// one's requests/s, the cached replays' rate as a percentage of the bare
// handler's, and the round trips per replay without and with the cache,
// counted by a go-redis hook.
func BenchmarkMiddlewareReplay(b *testing.B) {
	client := standalone(b)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(b, client)
	warmUp(b, s)
	uncached := idempotency.New(idempotency.WithStore(s))(replayedPayment)
	cached := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(1024, time.Minute))(replayedPayment)
	if code := post(uncached, "/payments", "replayed"); code != http.StatusCreated {
		b.Fatalf("first request: %d", code)
	}
	post(cached, "/payments", "replayed") // fills the cache from the store's answer
	log.take()

	sides := []*replaySide{{h: replayedPayment}, {h: uncached}, {h: cached}}
	b.ResetTimer()
	for round := range replayRounds {
		n := b.N / replayRounds
		if round < b.N%replayRounds {
			n++
		}
		for _, side := range sides {
			side.serve(b, n, log)
		}
	}
	b.StopTimer()
	bare, withoutCache, withCache := sides[0], sides[1], sides[2]
	b.ReportMetric(bare.perSecond(), "bare-req/s")
	b.ReportMetric(withoutCache.perSecond(), "uncached-req/s")
	b.ReportMetric(withCache.perSecond(), "cached-req/s")
	b.ReportMetric(100*withCache.perSecond()/bare.perSecond(), "cached/bare-%")
	b.ReportMetric(withoutCache.tripsPerRequest(), "round-trips/uncached-replay")
	b.ReportMetric(withCache.tripsPerRequest(), "round-trips/cached-replay")
}

// replayRounds is how many rounds BenchmarkMiddlewareReplay splits its
// requests into.
const replayRounds = 10

// replaySide is one of the handlers BenchmarkMiddlewareReplay compares,
// with the requests it served, the time they took and the round trips
// they made.
type replaySide struct {
	h               http.Handler
	requests, trips int64
	took            time.Duration
}

// serve sends side's handler n duplicates of the benchmark's completed
// request from benchGoroutines goroutines, and counts the round trips of
// the store's calls that log saw meanwhile: each script call (EVALSHA, or
// EVAL for a script the server has not seen) is one. A new connection's
// set-up (HELLO, CLIENT SETINFO) is left out: the pool opens connections
// as the load asks, whoever asks.
func (side *replaySide) serve(b *testing.B, n int, log *commandLog) {
	var next atomic.Int64
	start := time.Now()
	inParallel(func() {
		for i := next.Add(1); i <= int64(n); i = next.Add(1) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
			r.Header.Set("Idempotency-Key", "replayed")
			side.h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Errorf("replay: %d", w.Code)
				return
			}
		}
	})
	side.took += time.Since(start)
	side.requests += int64(n)
	for _, name := range log.take() {
		if name == "evalsha" || name == "eval" {
			side.trips++
		}
	}
}

func (side *replaySide) perSecond() float64 { return float64(side.requests) / side.took.Seconds() }

func (side *replaySide) tripsPerRequest() float64 {
	return float64(side.trips) / float64(side.requests)
}
