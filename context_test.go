package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// abandoning answers nothing once its request's context ends, as a handler
// whose payment call honours the context does.
func abandoning(runs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
}

// TestContextEndedAfterSuccessIsRecorded: the context ended while the
// handler ran, but the handler finished the payment and answered 201; its
// client may have that answer. The retry gets it replayed, and the payment
// is not made twice.
func TestContextEndedAfterSuccessIsRecorded(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	ctx, cancel := context.WithCancel(context.Background())
	first := post(mw, "k", "{}", func(r *http.Request) {
		*r = *r.WithContext(ctx)
		r.Body = cancelOnRead{r.Body, cancel}
	})
	require.Equal(t, http.StatusCreated, first.StatusCode)
	retry := post(mw, "k", "{}")
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

// TestDeadlineBeforeAnyAnswer: the handler gave up when the deadline
// passed, having written nothing. The client, still connected, gets 503
// request-interrupted (not net/http's empty 200), and the key is released,
// so the retry runs.
func TestDeadlineBeforeAnyAnswer(t *testing.T) {
	var runs atomic.Int64
	srv := httptest.NewServer(withDeadline(50*time.Millisecond, idempotency.New()(abandoning(&runs))))
	defer srv.Close()
	first := postTo(t, srv.URL, "k", "{}")
	requireProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
	require.NotEmpty(t, first.Header.Get("Retry-After"))
	require.Equal(t, http.StatusCreated, postTo(t, srv.URL, "k", "{}").StatusCode, "the retry runs")
	require.EqualValues(t, 2, runs.Load())
}

// TestDeadlineBeforeAnyAnswerInTx: the same in transactional mode: the
// transaction is rolled back, nothing is committed, and the client gets
// 503 request-interrupted.
func TestDeadlineBeforeAnyAnswerInTx(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := r.Context().Value(stagedKey{}).(*memTx)
		tx.staged = append(tx.staged, "payment")
		<-r.Context().Done()
	})
	srv := httptest.NewServer(withDeadline(50*time.Millisecond, idempotency.New(idempotency.WithStore(s))(handler)))
	defer srv.Close()
	first := postTo(t, srv.URL, "k", "{}")
	requireProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
	require.Empty(t, s.committed())
}

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

// TestTimeoutHandlerOutsideRecordsNoCutBody: an http.TimeoutHandler outside
// the middleware answers 503 when its time is up; the handler, ignoring its
// context, then charges and writes 201, but none of its body reaches
// anyone. That cut response is not replayed as the answer: the key is done
// but not replayable, so the retry gets 409 and the charge is not repeated.
func TestTimeoutHandlerOutsideRecordsNoCutBody(t *testing.T) {
	var runs atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	})
	srv := httptest.NewServer(http.TimeoutHandler(idempotency.New()(charge), 50*time.Millisecond, "timeout"))
	defer srv.Close()
	require.Equal(t, http.StatusServiceUnavailable, postTo(t, srv.URL, "k", "{}").StatusCode, "the timeout handler's answer")
	require.Eventually(t, func() bool {
		retry := postTo(t, srv.URL, "k", "{}")
		return retry.StatusCode == http.StatusConflict && retry.Header.Get("Retry-After") == ""
	}, 2*time.Second, 20*time.Millisecond, "once the first run has finished, the retry gets 409 not-replayable")
	require.EqualValues(t, 1, runs.Load())
}

// TestTimeoutHandlerOutsideRecordsAWholeSuccess: under an http.TimeoutHandler
// outside, a handler whose success reached no one but was whole (written
// in full before the timeout, or a status alone after it) is recorded, as
// any success after the request's context ended is: the client got the
// timeout's 503, and its retry is replayed the success instead of running
// the handler again.
func TestTimeoutHandlerOutsideRecordsAWholeSuccess(t *testing.T) {
	for name, pay := range map[string]func(w http.ResponseWriter, r *http.Request){
		"whole body before the timeout": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/payments/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":1}`)
			<-r.Context().Done()
		},
		"status alone after the timeout": func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			w.Header().Set("Location", "/payments/1")
			w.WriteHeader(http.StatusCreated)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var runs atomic.Int64
			charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				pay(w, r)
			})
			srv := httptest.NewServer(http.TimeoutHandler(idempotency.New()(charge), 30*time.Millisecond, "timeout"))
			defer srv.Close()
			require.Equal(t, http.StatusServiceUnavailable, postTo(t, srv.URL, "k", "{}").StatusCode, "the timeout handler's answer")
			require.Eventually(t, func() bool {
				retry := postTo(t, srv.URL, "k", "{}")
				return retry.StatusCode == http.StatusCreated && retry.Header.Get("Idempotent-Replayed") == "true" &&
					retry.Header.Get("Location") == "/payments/1"
			}, 2*time.Second, 20*time.Millisecond, "once the first run has finished, the retry is replayed its 201")
			require.EqualValues(t, 1, runs.Load())
		})
	}
}

// TestInterruptedProblemIsReadable: the 503 sent for a handler cut short
// before it wrote anything drops the Content-Encoding and the cookie the
// handler had set: the problem is plain JSON, and nothing of the request is
// kept.
func TestInterruptedProblemIsReadable(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Set-Cookie", "session=secret")
		<-r.Context().Done()
	})
	srv := httptest.NewServer(withDeadline(50*time.Millisecond, idempotency.New()(handler)))
	defer srv.Close()
	resp := postTo(t, srv.URL, "k", "{}")
	requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
	require.Empty(t, resp.Header.Values("Set-Cookie"))
}
