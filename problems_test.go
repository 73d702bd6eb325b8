package idempotency_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
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

// envelope is an API's own error format, as a problem writer writes it.
type envelope struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestProblemWriter: the application's writer writes every problem the
// middleware answers itself, given the request and the problem, with
// Retry-After set where the problem needs one; a writer that panics leaves
// no key claimed.
func TestProblemWriter(t *testing.T) {
	var gotPath string
	writer := idempotency.WithProblemWriter(func(w http.ResponseWriter, r *http.Request, p httpx.Problem) {
		gotPath = r.URL.Path
		var e envelope
		e.Error.Code, e.Error.Message = p.Type[strings.LastIndexByte(p.Type, '#')+1:], p.Title
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.Status)
		_ = json.NewEncoder(w).Encode(e)
	})
	decode := func(t *testing.T, resp *http.Response) envelope {
		t.Helper()
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var e envelope
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		return e
	}

	s := newFlakyStore()
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithKeyRequired(), writer,
		idempotency.WithErrorHandler(func(*http.Request, error) {}))(h)
	missing := post(mw, "", "{}")
	require.Equal(t, http.StatusBadRequest, missing.StatusCode)
	require.Equal(t, "key-missing", decode(t, missing).Error.Code)
	require.Equal(t, "/payments", gotPath)

	s.down.Store(true)
	unavailable := post(mw, "k", "{}")
	require.Equal(t, http.StatusServiceUnavailable, unavailable.StatusCode)
	require.Equal(t, "1", unavailable.Header.Get("Retry-After"))
	require.Equal(t, "store-unavailable", decode(t, unavailable).Error.Code)
	s.down.Store(false)

	done := startFirst(t, mw, h, "k", "{}")
	inFlight := post(mw, "k", "{}")
	require.Equal(t, http.StatusConflict, inFlight.StatusCode)
	require.Equal(t, "1", inFlight.Header.Get("Retry-After"))
	require.Equal(t, "key-in-flight", decode(t, inFlight).Error.Code)
	close(h.gate)
	<-done
	reused := post(mw, "k", `{"other":1}`)
	require.Equal(t, http.StatusUnprocessableEntity, reused.StatusCode)
	require.Equal(t, "key-reused", decode(t, reused).Error.Code)

	t.Run("that panics leaves no key claimed", func(t *testing.T) {
		var runs atomic.Int64
		panicking := idempotency.WithProblemWriter(func(http.ResponseWriter, *http.Request, httpx.Problem) {
			panic("writer bug")
		})
		mw := withDeadline(20*time.Millisecond, idempotency.New(panicking)(abandoning(&runs)))
		require.PanicsWithValue(t, "writer bug", func() { post(mw, "k", "{}") },
			"the writer is asked to write request-interrupted, and panics")
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the key was released")
		require.EqualValues(t, 2, runs.Load())
	})
}
