package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

func TestRecordedAndReleasedStatuses(t *testing.T) {
	recorded := []int{200, 201, 202, 204, 301, 302, 304, 400, 403, 404, 410, 422}
	released := []int{408, 409, 425, 429, 500, 502, 503, 504}
	for _, status := range append(recorded, released...) {
		t.Run(http.StatusText(status), func(t *testing.T) {
			h := &paymentHandler{status: status}
			mw := idempotency.New()(h)
			post(mw, "k", "{}")
			second := post(mw, "k", "{}")
			require.Equal(t, status, second.StatusCode)
			if contains(released, status) {
				require.Empty(t, second.Header.Get("Idempotent-Replayed"))
				require.EqualValues(t, 2, h.runs.Load(), "a %d releases the key so a retry runs", status)
				return
			}
			require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
			require.EqualValues(t, 1, h.runs.Load(), "a %d is recorded and replayed", status)
		})
	}
}

// TestRecordPolicy: a policy of the application's decides which statuses
// are recorded, given the request and the status sent (200 for a handler
// that wrote nothing), in plain and transactional mode; the rule for a
// request cut short still applies; a policy that panics releases the key
// and the panic goes on up.
func TestRecordPolicy(t *testing.T) {
	// Record the 503s of /quotes (a final "sold out"), and never a 400.
	policy := func(r *http.Request, status int) bool {
		switch {
		case status == http.StatusServiceUnavailable && r.URL.Path == "/quotes":
			return true
		case status == http.StatusBadRequest:
			return false
		}
		return idempotency.DefaultRecordPolicy(r, status)
	}
	for name, st := range map[string]func() store.Store{
		"plain":         func() store.Store { return store.NewMemory() },
		"transactional": func() store.Store { return &txMemory{Memory: store.NewMemory()} },
	} {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				target   string
				status   int
				recorded bool
			}{
				{"/quotes", http.StatusServiceUnavailable, true},
				{"/payments", http.StatusServiceUnavailable, false},
				{"/payments", http.StatusBadRequest, false},
				{"/payments", http.StatusCreated, true},
			} {
				h := &paymentHandler{status: tc.status}
				mw := idempotency.New(idempotency.WithStore(st()), idempotency.WithRecordPolicy(policy))(h)
				serve(mw, http.MethodPost, tc.target, "k", "{}")
				second := serve(mw, http.MethodPost, tc.target, "k", "{}")
				require.Equal(t, tc.status, second.StatusCode)
				replayed := second.Header.Get("Idempotent-Replayed") == "true"
				require.Equal(t, tc.recorded, replayed, "%s %d", tc.target, tc.status)
				require.EqualValues(t, map[bool]int64{true: 1, false: 2}[tc.recorded], h.runs.Load())
			}
		})
	}

	t.Run("gets the request and the status sent", func(t *testing.T) {
		var got []int
		var gotPath string
		mw := idempotency.New(idempotency.WithRecordPolicy(func(r *http.Request, status int) bool {
			got, gotPath = append(got, status), r.URL.Path
			return true
		}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Status") == "" {
				return // nothing written: net/http sends 200
			}
			w.WriteHeader(http.StatusAccepted)
		}))
		post(mw, "a", "{}")
		post(mw, "b", "{}", func(r *http.Request) { r.Header.Set("X-Status", "202") })
		require.Equal(t, []int{http.StatusOK, http.StatusAccepted}, got)
		require.Equal(t, "/payments", gotPath)
	})

	t.Run("is not asked to record a request cut short", func(t *testing.T) {
		asked := false
		always := idempotency.WithRecordPolicy(func(*http.Request, int) bool { asked = true; return true })
		var runs atomic.Int64
		mw := withDeadline(20*time.Millisecond, idempotency.New(always)(abandoning(&runs)))
		requireProblem(t, post(mw, "k", "{}"), http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
		require.False(t, asked)
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
		require.EqualValues(t, 2, runs.Load(), "the key was released")
	})

	t.Run("that panics releases the key", func(t *testing.T) {
		for name, st := range bothModes() {
			t.Run(name, func(t *testing.T) {
				var panics atomic.Bool
				panics.Store(true)
				h := &paymentHandler{}
				mw := idempotency.New(idempotency.WithStore(st), idempotency.WithRecordPolicy(func(*http.Request, int) bool {
					if panics.Load() {
						panic("policy bug")
					}
					return true
				}))(h)
				require.PanicsWithValue(t, "policy bug", func() { post(mw, "k", "{}") })
				panics.Store(false)
				retry := post(mw, "k", "{}")
				require.Equal(t, http.StatusCreated, retry.StatusCode, "the key is free: not 409")
				require.Empty(t, retry.Header.Get("Idempotent-Replayed"))
				require.EqualValues(t, 2, h.runs.Load())
			})
		}
	})
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func TestStoreLostBeforeCompleteIsReported(t *testing.T) {
	s := newFlakyStore()
	errs := &errorLog{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.down.Store(true) // the store goes away while the handler runs
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New(idempotency.WithStore(s), errs.option())(h)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the client still gets its response")
	require.Len(t, errs.all(), 1)
	require.ErrorIs(t, errs.all()[0], errStoreDown)
	require.Contains(t, errs.all()[0].Error(), "complete")
}

// cancelOnRead cancels the request's context while the handler reads the
// body, as a client that disconnects mid-request does.
type cancelOnRead struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// contextStore is a memory store that honours its contexts as a network
// store does: a call whose context has ended fails with the context's
// error and changes nothing.
type contextStore struct{ store.Store }

// hangUp returns a request edit that gives the request a context of its
// own, and a handler wrapper that cancels that context before (before is
// true) or after its handler runs, as a client that hangs up then does.
func hangUp(before bool) (func(*http.Request), func(http.Handler) http.Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	edit := func(r *http.Request) { *r = *r.WithContext(ctx) }
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if before {
				cancel()
			}
			next.ServeHTTP(w, r)
			cancel()
		})
	}
	return edit, wrap
}

// TestClientDisconnect: what is recorded or released when the client goes
// away while its handler runs.
func TestClientDisconnect(t *testing.T) {
	t.Run("releases the key", func(t *testing.T) {
		started := make(chan struct{})
		var runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				close(started)
				<-r.Context().Done() // the client went away
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		srv := httptest.NewServer(idempotency.New()(h))
		defer srv.Close()

		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k")
		go func() {
			<-started
			cancel()
		}()
		_, err = http.DefaultClient.Do(req)
		require.Error(t, err)

		require.Eventually(t, func() bool {
			resp := postTo(t, srv.URL, "k", "{}")
			return resp.StatusCode == http.StatusCreated
		}, 2*time.Second, 20*time.Millisecond, "once released, the retry runs")
		require.EqualValues(t, 2, runs.Load())
	})

	// TestDisconnectReleasesTheKeyOnAContextHonouringStore: when the client
	// hangs up before the handler answers (it writes nothing, or a 5xx), the
	// key is released with a context that is not cancelled, so even a store
	// that honours contexts frees it and the retry runs the handler again.
	t.Run("releases the key on a context-honouring store", func(t *testing.T) {
		for _, status := range []int{0, http.StatusBadGateway} {
			var runs atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					<-r.Context().Done() // the client has hung up
					if status != 0 {
						w.WriteHeader(status)
					}
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			errs := &errorLog{}
			mw := idempotency.New(idempotency.WithStore(contextStore{store.NewMemory()}), errs.option())
			edit, hangingUp := hangUp(true)
			post(mw(hangingUp(h)), "k", "{}", edit)
			retry := post(mw(h), "k", "{}")
			require.Equal(t, http.StatusCreated, retry.StatusCode, "status %d: the retry runs, the key is not left in flight", status)
			require.EqualValues(t, 2, runs.Load(), "status %d", status)
			require.Empty(t, errs.all(), "status %d", status)
		}
	})

	// TestAnswerBeforeDisconnectIsRecordedOnAContextHonouringStore: a handler
	// that wrote 201 before its client hung up has done the work; the response
	// is recorded with a context that is not cancelled, so even a store that
	// honours contexts keeps it, and the retry is replayed, not run again.
	t.Run("answer before it is recorded on a context-honouring store", func(t *testing.T) {
		h := &paymentHandler{}
		errs := &errorLog{}
		mw := idempotency.New(idempotency.WithStore(contextStore{store.NewMemory()}), errs.option())
		edit, hangingUp := hangUp(false)
		first := post(mw(hangingUp(h)), "k", "{}", edit)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		retry := post(mw(h), "k", "{}")
		require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
		require.Equal(t, http.StatusCreated, retry.StatusCode)
		require.EqualValues(t, 1, h.runs.Load())
		require.Empty(t, errs.all())
	})

	// TestRecordable4xxBeforeDisconnectIsReleased: only a 2xx or 3xx written
	// before the request's context ended counts as finished work. A 422 that
	// would otherwise be recorded is released when the context ends before the
	// handler returns, so the retry runs the handler again instead of
	// replaying the 422.
	t.Run("recordable 4xx before it is released", func(t *testing.T) {
		var runs atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = w.Write([]byte(`{"error":"card declined"}`))
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		mw := idempotency.New()
		edit, hangingUp := hangUp(false)
		first := post(mw(hangingUp(h)), "k", "{}", edit)
		require.Equal(t, http.StatusUnprocessableEntity, first.StatusCode, "the client gets what the handler wrote")
		retry := post(mw(h), "k", "{}")
		require.Empty(t, retry.Header.Get("Idempotent-Replayed"))
		require.Equal(t, http.StatusCreated, retry.StatusCode, "the retry runs")
		require.EqualValues(t, 2, runs.Load())
	})
}

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

// TestDeadlineBeforeAnyAnswer: a handler cut off by its deadline before it
// wrote anything gets its client 503 request-interrupted.
func TestDeadlineBeforeAnyAnswer(t *testing.T) {
	// TestDeadlineBeforeAnyAnswer: the handler gave up when the deadline
	// passed, having written nothing. The client, still connected, gets 503
	// request-interrupted (not net/http's empty 200), and the key is released,
	// so the retry runs.
	t.Run("plain", func(t *testing.T) {
		var runs atomic.Int64
		srv := httptest.NewServer(withDeadline(50*time.Millisecond, idempotency.New()(abandoning(&runs))))
		defer srv.Close()
		first := postTo(t, srv.URL, "k", "{}")
		requireProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
		require.NotEmpty(t, first.Header.Get("Retry-After"))
		require.Equal(t, http.StatusCreated, postTo(t, srv.URL, "k", "{}").StatusCode, "the retry runs")
		require.EqualValues(t, 2, runs.Load())
	})

	// TestDeadlineBeforeAnyAnswerInTx: the same in transactional mode: the
	// transaction is rolled back, nothing is committed, and the client gets
	// 503 request-interrupted.
	t.Run("in a transaction", func(t *testing.T) {
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
	})

	// TestInterruptedProblemIsReadable: the 503 sent for a handler cut short
	// before it wrote anything drops the Content-Encoding and the cookie the
	// handler had set: the problem is plain JSON, and nothing of the request is
	// kept.
	t.Run("problem is readable", func(t *testing.T) {
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
	})
}

// TestTimeoutHandlerOutside: under an http.TimeoutHandler outside the
// middleware, what a handler that runs past the timeout leaves recorded.
func TestTimeoutHandlerOutside(t *testing.T) {
	// TestTimeoutHandlerOutsideRecordsNoCutBody: an http.TimeoutHandler outside
	// the middleware answers 503 when its time is up; the handler, ignoring its
	// context, then charges and writes 201, but none of its body reaches
	// anyone. That cut response is not replayed as the answer: the key is done
	// but not replayable, so the retry gets 409 and the charge is not repeated.
	t.Run("records no cut body", func(t *testing.T) {
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
	})

	// TestTimeoutHandlerOutsideRecordsAWholeSuccess: under an http.TimeoutHandler
	// outside, a handler whose success reached no one but was whole (written
	// in full before the timeout, or a status alone after it) is recorded, as
	// any success after the request's context ended is: the client got the
	// timeout's 503, and its retry is replayed the success instead of running
	// the handler again.
	t.Run("records a whole success", func(t *testing.T) {
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
	})
}
