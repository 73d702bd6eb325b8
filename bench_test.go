package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

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
		idempotencytest.ServeKeys(b, idempotencytest.EchoJSON, idempotencytest.NewKey)
	})
	b.Run("first", func(b *testing.B) {
		idempotencytest.ServeKeys(b, idempotencytest.Steady(idempotencytest.EchoJSON), idempotencytest.NewKey)
	})
	b.Run("replay", func(b *testing.B) {
		const replayed = 1000
		mw := idempotency.New()(idempotencytest.EchoJSON)
		mw.ServeHTTP(httptest.NewRecorder(), idempotencytest.Request(replayed))
		idempotencytest.ServeKeys(b, mw, func(int) int { return replayed })
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
		idempotencytest.ServeKeys(b, idempotency.New(idempotency.WithStore(roomForAll))(idempotencytest.EchoJSON), idempotencytest.NewKey)
	})
	b.Run("discard", func(b *testing.B) {
		idempotencytest.ServeKeys(b, idempotency.New(idempotency.WithStore(discard{}))(idempotencytest.EchoJSON), idempotencytest.NewKey)
	})
	b.Run("discard-unhashed", func(b *testing.B) {
		idempotencytest.ServeKeys(b, idempotency.New(idempotency.WithStore(discard{}), sameFingerprint)(idempotencytest.EchoJSON), idempotencytest.NewKey)
	})
	b.Run("memory-unhashed", func(b *testing.B) {
		idempotencytest.ServeKeys(b, idempotencytest.Steady(idempotencytest.EchoJSON, sameFingerprint), idempotencytest.NewKey)
	})
	b.Run("floor", func(b *testing.B) {
		idempotencytest.ServeKeys(b, keepBodies(idempotencytest.EchoJSON), idempotencytest.NewKey)
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
