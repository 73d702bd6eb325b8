package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// benchBody is a 1 KiB JSON payment request.
var benchBody = func() []byte {
	b := []byte(`{"amount":100,"currency":"EUR","note":"`)
	b = append(b, bytes.Repeat([]byte("x"), 1024-len(b)-2)...)
	return append(b, `"}`...)
}()

// echoJSON is the benchmarked handler: it reads the body and answers 201
// with it, as a small JSON API does.
var echoJSON = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
})

// BenchmarkMiddleware measures the middleware's cost on the in-memory
// store: bare is the handler alone, first a new key each iteration, replay
// a duplicate of a completed request.
//
// first runs the store as a long-running service does: records expire as
// fast as new keys arrive, so the store, and the heap under it, stay the
// same size. BenchmarkFirstParts/growing measures the same requests while
// the store keeps every record of the run.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		serveKeys(b, echoJSON, newKey)
	})
	b.Run("first", func(b *testing.B) {
		serveKeys(b, steadyFirst(), newKey)
	})
	b.Run("replay", func(b *testing.B) {
		const replayed = 1000
		mw := idempotency.New()(echoJSON)
		mw.ServeHTTP(httptest.NewRecorder(), newBenchRequest(replayed))
		serveKeys(b, mw, func(int) int { return replayed })
	})
}

// BenchmarkFirstParts splits the cost of BenchmarkMiddleware/first: the
// memory store keeping every record of the run (growing: the heap grows by
// each stored response, and the operating system must supply new pages), a
// store that keeps nothing (discard), the same without hashing the body
// (the fingerprint is a constant), the memory store as first runs it,
// without hashing the body, and a reference for first (floor: see
// keepBodies). It measures; no test uses discard or keepBodies.
func BenchmarkFirstParts(b *testing.B) {
	sameFingerprint := idempotency.WithFingerprint(func(*http.Request, []byte) string { return "same" })
	b.Run("growing", func(b *testing.B) {
		roomForAll := store.NewMemory(store.WithMaxRecords(b.N+1), store.WithMaxBytes(math.MaxInt))
		serveKeys(b, idempotency.New(idempotency.WithStore(roomForAll))(echoJSON), newKey)
	})
	b.Run("discard", func(b *testing.B) {
		serveKeys(b, idempotency.New(idempotency.WithStore(discard{}))(echoJSON), newKey)
	})
	b.Run("discard-unhashed", func(b *testing.B) {
		serveKeys(b, idempotency.New(idempotency.WithStore(discard{}), sameFingerprint)(echoJSON), newKey)
	})
	b.Run("memory-unhashed", func(b *testing.B) {
		serveKeys(b, steadyFirst(sameFingerprint), newKey)
	})
	b.Run("floor", func(b *testing.B) {
		serveKeys(b, keepBodies(echoJSON), newKey)
	})
}

// keptBodies is how many response bodies keepBodies holds: a retention's
// worth of requests at 6 to 7 µs each, as many records as first's store
// held at its steady size when first took that long (at 4 µs it holds
// about 50 000).
const keptBodies = 1 << 15

// keepBodies wraps h in the plainest way of keeping responses in the
// process, and nothing else: it reads the request body whole into a buffer
// of its own and hands that to h, and it keeps a copy of h's response
// body, each in an allocation of its own, the last keptBodies of them, as
// a store keeps records. It is BenchmarkFirstParts/floor, a reference for
// first: it does not store by key, match or replay anything, and it serves
// one request at a time. (The memory store keeps its copies in shared
// chunks, which costs less than an allocation each.)
func keepBodies(h http.Handler) http.Handler {
	kept := make([]string, keptBodies)
	next := 0
	w := &bodyCopier{}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			panic(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.ResponseWriter, w.body = rw, w.body[:0]
		h.ServeHTTP(w, r)
		kept[next] = string(w.body)
		next = (next + 1) % keptBodies
	})
}

// bodyCopier is a ResponseWriter that copies the body written through it
// into body, a buffer reused from one request to the next.
type bodyCopier struct {
	http.ResponseWriter
	body []byte
}

func (c *bodyCopier) Write(p []byte) (int, error) {
	c.body = append(c.body, p...)
	return c.ResponseWriter.Write(p)
}

// steadyRetention is how long the store of a steady first run keeps a
// record: short, so that old records expire while the run goes on.
const steadyRetention = 200 * time.Millisecond

// steadyFirst returns the middleware around echoJSON on a memory store
// that has reached its steady size: it has served new keys (numbered below
// zero, apart from the run's) for several retentions, so records now expire
// as fast as new ones arrive. Its caps leave room for every record a
// retention holds at up to five million requests a second.
func steadyFirst(opts ...idempotency.Option) http.Handler {
	mem := store.NewMemory(store.WithMaxRecords(1<<20), store.WithMaxBytes(1<<30))
	opts = append(opts, idempotency.WithStore(mem), idempotency.WithRetention(steadyRetention))
	h := idempotency.New(opts...)(echoJSON)
	w := httptest.NewRecorder()
	for n, start := -1, time.Now(); time.Since(start) < 4*steadyRetention; n-- {
		w.Body.Reset()
		h.ServeHTTP(w, newBenchRequest(n))
	}
	return h
}

// newBenchRequest returns a POST of benchBody with key number n. Every
// benchmarked request, bare ones included, carries the same headers and
// builds its key string the same way (one allocation), so the differences
// between sub-benchmarks are the middleware's alone.
func newBenchRequest(n int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(n))
	return r
}

// newKey numbers the keys of a run 0, 1, 2, ...: a new key each iteration.
func newKey(i int) int { return i }

// serveKeys serves b.N requests through h, the i-th with key number
// keyNumber(i). Keys are built as they are used, not kept in a slice of
// b.N, which the garbage collector would scan at every cycle.
func serveKeys(b *testing.B, h http.Handler, keyNumber func(i int) int) {
	b.ReportAllocs()
	w := httptest.NewRecorder()
	b.ResetTimer()
	for i := range b.N {
		w.Body.Reset()
		clear(w.Header()) // net/http gives each response an empty header
		h.ServeHTTP(w, newBenchRequest(keyNumber(i)))
	}
}

// discard is a store that claims every key and keeps nothing, to measure
// the middleware without any store's cost.
type discard struct{}

func (discard) Claim(_ context.Context, _, fingerprint, token string, _ time.Duration) (store.Record, bool, error) {
	return store.Record{State: store.StateInFlight, Fingerprint: fingerprint, Owner: store.Lease{Token: token, Fence: 1}}, true, nil
}

func (discard) Renew(context.Context, string, store.Lease, time.Duration) error { return nil }

func (discard) Complete(context.Context, string, store.Lease, *store.Response, time.Duration) error {
	return nil
}

func (discard) Release(context.Context, string, store.Lease) error { return nil }
