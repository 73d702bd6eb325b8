package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// replayBody is the body of the request BenchmarkMiddlewareReplay
// replays.
const replayBody = `{"amount":100}`

// BenchmarkMiddlewareReplay measures replays of one completed key through
// the middleware on the Redis store, from 32 goroutines: b.N requests each
// to the bare handler, to the middleware without the replay cache, and to
// the middleware with it (WithReplayCache), in interleaved rounds so that
// a busy moment of the machine weighs on all three alike. in-process calls
// ServeHTTP with httptest's request and recorder; over-http sends each
// request through a keep-alive connection of a net/http client to an
// httptest.Server, as a service's clients do. It reports each one's
// requests/s, the cached replays' rate as a percentage of the bare
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
	handlers := [replaySides]http.Handler{replayedPayment, uncached, cached}

	b.Run("in-process", func(b *testing.B) {
		compareReplays(b, log, func(side int) int {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(replayBody))
			r.Header.Set("Idempotency-Key", "replayed")
			handlers[side].ServeHTTP(w, r)
			return w.Code
		})
	})
	b.Run("over-http", func(b *testing.B) {
		urls := make([]string, len(handlers))
		for i, h := range handlers {
			srv := httptest.NewServer(h)
			b.Cleanup(srv.Close)
			urls[i] = srv.URL + "/payments"
		}
		transport := &http.Transport{MaxIdleConnsPerHost: benchGoroutines}
		b.Cleanup(transport.CloseIdleConnections)
		send := func(side int) int {
			r, _ := http.NewRequest(http.MethodPost, urls[side], strings.NewReader(replayBody))
			r.Header.Set("Idempotency-Key", "replayed")
			resp, err := transport.RoundTrip(r)
			if err != nil {
				b.Error(err)
				return 0
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return resp.StatusCode
		}
		// The route holds the server's host and port: a key of its own for
		// each server, completed here before the count begins.
		for side := range handlers {
			send(side)
		}
		log.take()
		compareReplays(b, log, send)
	})
}

// replaySides is how many handlers BenchmarkMiddlewareReplay compares:
// the bare one, the middleware without the cache, and with it.
const replaySides = 3

// compareReplays sends b.N requests to each side (0 the bare handler, 1
// the middleware without the cache, 2 with it) through send, in
// replayRounds interleaved rounds, each begun by the next side, and
// reports what
// BenchmarkMiddlewareReplay does.
func compareReplays(b *testing.B, log *commandLog, send func(side int) int) {
	var sides [replaySides]replaySide
	for round := range replayRounds {
		n := b.N / replayRounds
		if round < b.N%replayRounds {
			n++
		}
		for j := range sides {
			i := (round + j) % replaySides // each side goes first in turn
			sides[i].serve(b, n, log, func() int { return send(i) })
		}
	}
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

// replaySide is what one of the handlers BenchmarkMiddlewareReplay
// compares did: the requests it served, the time they took and the round
// trips they made.
type replaySide struct {
	requests, trips int64
	took            time.Duration
}

// serve sends n duplicates of the benchmark's completed request, each
// with send, from benchGoroutines goroutines, and counts the round trips
// of the store's calls that log saw meanwhile. A new connection's set-up
// (HELLO, CLIENT SETINFO) is left out: the pool opens connections as the
// load asks, whoever asks.
func (side *replaySide) serve(b *testing.B, n int, log *commandLog, send func() int) {
	var next atomic.Int64
	start := time.Now()
	inParallel(func() {
		for i := next.Add(1); i <= int64(n); i = next.Add(1) {
			if code := send(); code != http.StatusCreated {
				b.Errorf("replay: %d", code)
				return
			}
		}
	})
	side.took += time.Since(start)
	side.requests += int64(n)
	for _, trip := range log.take() {
		if !strings.HasPrefix(trip, "hello") {
			side.trips++
		}
	}
}

func (side *replaySide) perSecond() float64 { return float64(side.requests) / side.took.Seconds() }

func (side *replaySide) tripsPerRequest() float64 {
	return float64(side.trips) / float64(side.requests)
}

// BenchmarkDo counts Do's round trips to Redis, a first call and a stored
// one, beside their targets (2 and 1).
func BenchmarkDo(b *testing.B) {
	client := standalone(b)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(b, client)
	sent := func(context.Context) ([]byte, error) { return []byte("sent"), nil }
	for _, bc := range []struct {
		name   string
		target float64
		key    func(i int) string
	}{
		{"first", 2, func(i int) string { return "first-" + strconv.Itoa(i) }},
		{"stored", 1, func(int) string { return "stored" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := idempotency.Do(b.Context(), s, "stored", sent); err != nil {
				b.Fatal(err)
			}
			log.take()
			i := 0
			for b.Loop() {
				if _, err := idempotency.Do(b.Context(), s, bc.key(i), sent); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(len(log.take()))/float64(b.N), "roundtrips/op")
			b.ReportMetric(bc.target, "target-roundtrips")
		})
	}
}

// BenchmarkFirstRequest counts the round trips to Redis of a first request
// through the middleware on the shared single Redis, with the store built
// without a replica option: it asks the server once, finds no replica,
// and a first request stays a claim and a complete, beside its target of
// 2. A store that asked again meanwhile adds its one INFO to the count.
func BenchmarkFirstRequest(b *testing.B) {
	client := standalone(b)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(b, client)
	handler := idempotency.New(idempotency.WithStore(s))(replayedPayment)
	if code := post(handler, "/payments", "warm-up"); code != http.StatusCreated { // asks for replicas, loads the scripts
		b.Fatalf("warm-up: %d", code)
	}
	if r := s.Replication(); r.Replicas != 0 {
		b.Fatalf("the shared Redis has replicas: %v", r)
	}
	firstRequests(b, log, handler, 2)
}

// firstRequests sends handler a first request per loop and reports the
// calls log counts per request, beside target.
func firstRequests(b *testing.B, log *commandLog, handler http.Handler, target float64) {
	log.take()
	i := 0
	for b.Loop() {
		if code := post(handler, "/payments", "first-"+strconv.Itoa(i)); code != http.StatusCreated {
			b.Fatalf("first request: %d", code)
		}
		i++
	}
	b.ReportMetric(float64(len(log.take()))/float64(b.N), "round-trips/op")
	b.ReportMetric(target, "target-round-trips")
}

// BenchmarkFirstRequestStep is BenchmarkFirstRequest for a handler that
// runs one step: a step is one round trip more, beside its target of 3.
func BenchmarkFirstRequestStep(b *testing.B) {
	client := standalone(b)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(b, client)
	handler := stepHandler(s)
	if code := post(handler, "/payments", "warm-up"); code != http.StatusCreated {
		b.Fatalf("warm-up: %d", code)
	}
	firstRequests(b, log, handler, 3)
}
