package idempotency_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/seed43327c4c/idempotency"
)

// TestDeadlineWhileWaiting: a duplicate waiting (WithWait) for an
// in-flight key whose own deadline passes gets 409, as when the wait times
// out, not an empty 200.
func TestDeadlineWhileWaiting(t *testing.T) {
	h := &paymentHandler{gate: make(chan struct{})}
	mw := withDeadline(200*time.Millisecond, idempotency.New(idempotency.WithWait(5*time.Second))(h))
	done := startFirst(t, mw, h, "k", "{}")
	requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemKeyInFlight)
	close(h.gate)
	<-done
}
