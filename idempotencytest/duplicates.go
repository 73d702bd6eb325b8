package idempotencytest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// retryFor bounds how long a duplicate is sent again while it gets 409
// (its first request still running).
const retryFor = 10 * time.Second

// RequireIdempotent sends n copies of req at once through h, the
// application's handler with the middleware in it, each sent again while
// it gets 409, and fails t unless exactly one answer is not marked
// Idempotent-Replayed (the handler ran once), every answer has the same
// status, body and Location, and req's key with otherBody instead gets 422.
// req carries the key and whatever authenticates it; its body is read once.
// It panics if n is below 2.
func RequireIdempotent(t testing.TB, h http.Handler, req *http.Request, n int, otherBody string) {
	t.Helper()
	if n < 2 {
		panic("idempotencytest: RequireIdempotent expects n >= 2")
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Errorf("idempotencytest: reading the request's body: %v", err)
		return
	}
	answers := make([]*httptest.ResponseRecorder, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = sendUntilDecided(h, req, body)
		})
	}
	close(start)
	wg.Wait()

	runs, first := 0, answers[0]
	for i, a := range answers {
		if a.Header().Get("Idempotent-Replayed") != "true" {
			runs++
		}
		if a.Code != first.Code || a.Body.String() != first.Body.String() || a.Header().Get("Location") != first.Header().Get("Location") {
			t.Errorf("idempotencytest: duplicate %d got %d %q, duplicate 0 got %d %q", i, a.Code, a.Body, first.Code, first.Body)
		}
	}
	if runs != 1 {
		t.Errorf("idempotencytest: the handler ran %d times for %d duplicates, want once (answers not marked Idempotent-Replayed; the first: %d)",
			runs, n, first.Code)
	}
	if reused := send(h, req, []byte(otherBody)); reused.Code != http.StatusUnprocessableEntity {
		t.Errorf("idempotencytest: the same key with another body got %d, want 422", reused.Code)
	}
}

// sendUntilDecided sends req with body through h until it gets an answer
// other than 409, or retryFor passes.
func sendUntilDecided(h http.Handler, req *http.Request, body []byte) *httptest.ResponseRecorder {
	deadline := time.Now().Add(retryFor)
	for {
		w := send(h, req, body)
		if w.Code != http.StatusConflict || time.Now().After(deadline) {
			return w
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func send(h http.Handler, req *http.Request, body []byte) *httptest.ResponseRecorder {
	r := req.Clone(req.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
