package idempotency_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

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
// a duplicate of a completed request. Every request, bare ones included,
// carries the same headers, and every iteration builds its key string the
// same way (one allocation), so that the differences between the three are
// the middleware's alone. Keys are built as they are used, not kept in a
// slice of b.N, which the garbage collector would scan at every cycle.
func BenchmarkMiddleware(b *testing.B) {
	newRequest := func(key string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(benchBody))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		return r
	}
	run := func(b *testing.B, h http.Handler, keyNumber func(i int) int) {
		b.ReportAllocs()
		w := httptest.NewRecorder()
		b.ResetTimer()
		for i := range b.N {
			w.Body.Reset()
			h.ServeHTTP(w, newRequest("key-"+strconv.Itoa(keyNumber(i))))
		}
	}
	newKey := func(i int) int { return i }
	b.Run("bare", func(b *testing.B) {
		run(b, echoJSON, newKey)
	})
	b.Run("first", func(b *testing.B) {
		roomForAll := store.NewMemory(store.WithMaxRecords(b.N + 1))
		mw := idempotency.New(idempotency.WithStore(roomForAll))(echoJSON)
		run(b, mw, newKey)
	})
	b.Run("replay", func(b *testing.B) {
		const replayed = 1000
		mw := idempotency.New()(echoJSON)
		mw.ServeHTTP(httptest.NewRecorder(), newRequest("key-"+strconv.Itoa(replayed)))
		run(b, mw, func(int) int { return replayed })
	})
}
