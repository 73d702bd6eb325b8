package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

func TestFirstRequestRunsAndDuplicateIsReplayed(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	first := post(mw, "k", `{"amount":100}`)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "session=secret", first.Header.Get("Set-Cookie"), "the first response is untouched")
	require.Equal(t, "1", first.Header.Get("X-Run"))

	for range 3 {
		dup := post(mw, "k", `{"amount":100}`)
		require.Equal(t, http.StatusCreated, dup.StatusCode)
		require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
		require.Equal(t, `{"amount":100}`, readAll(t, dup))
		require.Equal(t, "application/json", dup.Header.Get("Content-Type"))
		require.Equal(t, "/payments/1", dup.Header.Get("Location"))
		require.Empty(t, dup.Header.Values("Set-Cookie"), "cookies are never replayed")
		require.Empty(t, dup.Header.Values("X-Run"), "headers outside the allow-list are not replayed")
	}
	require.EqualValues(t, 1, h.runs.Load())
}

func TestDuplicateInFlightGets409WithRetryAfter(t *testing.T) {
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithRetryAfter(1500 * time.Millisecond))(h)
	done := startFirst(t, mw, h, "k", "{}")
	dup := postWithin(t, 5*time.Second, mw, "k", "{}")
	require.Equal(t, "2", dup.Header.Get("Retry-After"), "1.5 s rounds up to 2")
	requireProblem(t, dup, http.StatusConflict, idempotency.ProblemKeyInFlight)
	close(h.gate)
	<-done
	require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

// TestDifferentRequestSameKeyGets422: a request that differs from the one
// that first used its key is refused, whether that one has finished or is
// still running.
func TestDifferentRequestSameKeyGets422(t *testing.T) {
	t.Run("after the first completed", func(t *testing.T) {
		cases := map[string]func(*http.Request){
			"body":         func(r *http.Request) { r.Body = http.NoBody; r.ContentLength = 0 },
			"query":        func(r *http.Request) { r.URL.RawQuery = "x=1" },
			"content type": func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
		}
		for name, edit := range cases {
			t.Run(name, func(t *testing.T) {
				h := &paymentHandler{}
				mw := idempotency.New()(h)
				post(mw, "k", `{"amount":1}`)
				requireProblem(t, post(mw, "k", `{"amount":1}`, edit),
					http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
				require.EqualValues(t, 1, h.runs.Load())
			})
		}
	})

	t.Run("while the first is in flight", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := idempotency.New()(h)
		done := startFirst(t, mw, h, "k", `{"amount":1}`)
		requireProblem(t, post(mw, "k", `{"amount":2}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
		close(h.gate)
		<-done
		require.EqualValues(t, 1, h.runs.Load())
	})
}

// TestRetryAfterTheRetentionGets422KeyExpired: on a store that keeps
// tombstones, a retry that comes after the record's retention gets 422
// key-expired naming when the request completed, another request under
// the key 422 key-reused, and the handler never runs again; without
// tombstones the retry runs as a new request.
func TestRetryAfterTheRetentionGets422KeyExpired(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tombstones []store.MemoryOption
	}{
		{"with tombstones", []store.MemoryOption{store.WithTombstones(time.Hour)}},
		{"without", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &paymentHandler{}
			var observed observations
			mw := idempotency.New(idempotency.WithStore(store.NewMemory(tc.tombstones...)),
				idempotency.WithRetention(100*time.Millisecond), observed.option())(h)
			before := time.Now().Truncate(time.Second)
			require.Equal(t, http.StatusCreated, post(mw, "k", `{"amount":1}`).StatusCode)
			after := time.Now()
			time.Sleep(300 * time.Millisecond)

			resp := post(mw, "k", `{"amount":1}`)
			if tc.tombstones == nil {
				require.Equal(t, http.StatusCreated, resp.StatusCode, "a late retry without tombstones runs again")
				require.EqualValues(t, 2, h.runs.Load())
				return
			}
			require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
			var problem struct{ Type, Detail string }
			require.NoError(t, json.Unmarshal([]byte(readAll(t, resp)), &problem))
			require.Equal(t, idempotency.ProblemKeyExpired, problem.Type)
			at, ok := strings.CutPrefix(problem.Detail, "It completed at ")
			require.True(t, ok, "detail %q names the completion", problem.Detail)
			completed, err := time.Parse(time.RFC3339, strings.Fields(at)[0])
			require.NoError(t, err)
			require.WithinRange(t, completed, before, after)
			requireProblem(t, post(mw, "k", `{"amount":2}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
			require.EqualValues(t, 1, h.runs.Load())
			require.Equal(t, 1, observed.outcomes()[idempotency.OutcomeKeyExpired])
		})
	}
}

// forgetfulStore reports every live record completed but without its
// response, as a faulty store might.
type forgetfulStore struct{ store.Store }

// TestCompletedWithoutResponse: a record reported completed without its
// response gets 409 not-replayable; the handler does not run again and
// nothing panics.
func TestCompletedWithoutResponse(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithStore(forgetfulStore{store.NewMemory()}))(h)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemNotReplayable)
	require.EqualValues(t, 1, h.runs.Load())
}

// TestStoreDown: a claim the store cannot answer fails closed, or with
// WithFailOpen runs the handler unprotected.
func TestStoreDown(t *testing.T) {
	t.Run("fails closed with 503", func(t *testing.T) {
		s := newFlakyStore()
		errs := &errorLog{}
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithStore(s), errs.option())(h)
		s.down.Store(true)
		resp := post(mw, "k", "{}")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		body := readAll(t, resp)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Contains(t, body, idempotency.ProblemStoreUnavailable)
		require.NotContains(t, body, "10.0.0.1", "no internal error text in the response")
		require.NotContains(t, body, "refused")
		require.Zero(t, h.runs.Load())
		require.Len(t, errs.all(), 1)
		require.ErrorIs(t, errs.all()[0], errStoreDown)

		s.down.Store(false)
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the key is usable once the store is back")
		require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("fail-open runs unprotected and logs", func(t *testing.T) {
		s := newFlakyStore()
		var logs bytes.Buffer
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(),
			idempotency.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))(h)
		s.down.Store(true)
		for range 2 {
			resp := post(mw, "k", `{"amount":5}`)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, `{"amount":5}`, readAll(t, resp), "the handler got the body")
		}
		require.EqualValues(t, 2, h.runs.Load())
		require.Contains(t, logs.String(), "running handler unprotected")
		require.Contains(t, logs.String(), "idempotency: store error")
	})
}

// cancellingStore fails every claim as a network store does when the
// request's context is cancelled during the call: the client went away.
type cancellingStore struct {
	store.Store
	cancel context.CancelFunc
}

// TestRequestEndedDuringClaim: a claim cut off because its request ended
// runs nothing, even with WithFailOpen.
func TestRequestEndedDuringClaim(t *testing.T) {
	t.Run("client gone runs nothing even fail-open", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errs := &errorLog{}
		h := &paymentHandler{}
		s := &cancellingStore{Store: store.NewMemory(), cancel: cancel}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(), errs.option())(h)
		post(mw, "k", "{}", func(r *http.Request) { *r = *r.WithContext(ctx) })
		require.Zero(t, h.runs.Load(), "an unprotected run would let the client's retry run it again")
		require.Empty(t, errs.all(), "a client going away is not a store error")
	})

	// TestDeadlineDuringClaim: a claim cut off by the request's deadline is a
	// store failure worth logging, and the client gets 503
	// request-interrupted; even with fail-open the handler does not run.
	t.Run("deadline", func(t *testing.T) {
		errs := &errorLog{}
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithStore(&claimFailingStore{Store: store.NewMemory(), fail: stall}), idempotency.WithFailOpen(), errs.option())(h)
		srv := httptest.NewServer(withDeadline(50*time.Millisecond, mw))
		defer srv.Close()
		resp := postTo(t, srv.URL, "k", "{}")
		requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.ProblemRequestInterrupted)
		require.Zero(t, h.runs.Load())
		require.Len(t, errs.all(), 1)
		require.ErrorIs(t, errs.all()[0], context.DeadlineExceeded)
	})
}

// TestConcurrentDuplicatesRunTheHandlerOnce sends one key from 200
// goroutines at once to a slow handler over real connections. The handler
// stays busy until some duplicate has been turned away with 409 (or 5 s).
func TestConcurrentDuplicatesRunTheHandlerOnce(t *testing.T) {
	conflict := make(chan struct{})
	var once sync.Once
	var runs atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-conflict:
		case <-time.After(5 * time.Second):
		}
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, r.Body)
	})
	srv := httptest.NewServer(idempotency.New()(slow))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}

	type result struct {
		status   int
		replayed bool
		body     string
		location string
	}
	const senders = 200
	results := make([]result, senders)
	storetest.Together(senders, func(i int) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":42}`))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Idempotency-Key", "one-key")
		resp, err := client.Do(req)
		if err != nil {
			results[i] = result{status: -1, body: err.Error()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusConflict {
			once.Do(func() { close(conflict) })
		}
		results[i] = result{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true",
			string(body), resp.Header.Get("Location")}
	})

	require.EqualValues(t, 1, runs.Load(), "the handler ran exactly once")
	var fresh, conflicts int
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated && !r.replayed:
			fresh++
			require.Equal(t, `{"amount":42}`, r.body)
		case r.status == http.StatusCreated:
			require.Equal(t, `{"amount":42}`, r.body, "a replay is identical")
			require.Equal(t, "/payments/1", r.location)
		case r.status == http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("unexpected response %d: %s", r.status, r.body)
		}
	}
	require.Equal(t, 1, fresh)
	require.Positive(t, conflicts, "the duplicates that overlapped the slow handler got 409")
}
