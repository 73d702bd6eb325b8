package idempotency_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestProblemBodiesAreRFC9457(t *testing.T) {
	mw := idempotency.New(idempotency.WithKeyRequired())(&paymentHandler{})
	resp := post(mw, "", "{}")
	var problem map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&problem))
	require.Equal(t, idempotency.ProblemKeyMissing, problem["type"])
	require.EqualValues(t, http.StatusBadRequest, problem["status"])
	require.NotEmpty(t, problem["title"])
}

// TestWithRetryAfterSetsBothRetryableProblems: the wait set by
// WithRetryAfter is the Retry-After of the 503 sent when the store cannot
// be reached and of the 409 sent for a key still in flight.
func TestWithRetryAfterSetsBothRetryableProblems(t *testing.T) {
	s := newFlakyStore()
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithRetryAfter(7*time.Second),
		idempotency.WithErrorHandler(func(*http.Request, error) {}))(h)

	s.down.Store(true)
	unavailable := post(mw, "k", "{}")
	require.Equal(t, "7", unavailable.Header.Get("Retry-After"))
	requireProblem(t, unavailable, http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable)
	s.down.Store(false)

	done := startFirst(t, mw, h, "k", "{}")
	inFlight := post(mw, "k", "{}")
	require.Equal(t, "7", inFlight.Header.Get("Retry-After"))
	requireProblem(t, inFlight, http.StatusConflict, idempotency.ProblemKeyInFlight)
	close(h.gate)
	<-done
}
