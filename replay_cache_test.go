package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// countingStore is a store that counts the calls made to it; a handler
// on it may run steps only if its Store keeps them.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *countingStore) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	s.calls.Add(1)
	return s.Store.Renew(ctx, key, owner, lease)
}

func (s *countingStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	s.calls.Add(1)
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

func (s *countingStore) Release(ctx context.Context, key string, owner store.Lease) error {
	s.calls.Add(1)
	return s.Store.Release(ctx, key, owner)
}

// SaveStep counts a step's call, on a store that keeps steps.
func (s *countingStore) SaveStep(ctx context.Context, key string, owner store.Lease, step store.Step) error {
	s.calls.Add(1)
	return s.Store.(store.StepStore).SaveStep(ctx, key, owner, step)
}

// callsOf returns how many store calls s saw while do ran.
func (s *countingStore) callsOf(do func()) int64 {
	before := s.calls.Load()
	do()
	return s.calls.Load() - before
}

// exchangeOf is the response to one request, as a client sees it.
type exchangeOf struct {
	status int
	header http.Header
	body   string
}

// postFor posts body with key to h and returns the response.
func postFor(t *testing.T, h http.Handler, key, body string) exchangeOf {
	t.Helper()
	resp := post(h, key, body)
	return exchangeOf{resp.StatusCode, resp.Header, readAll(t, resp)}
}

func TestReplayCache(t *testing.T) {
	// A replay answered from the cache makes no store call, and is the
	// uncached replay byte for byte, headers and all, with the same
	// outcome told to the observer; the cache is filled both by the
	// process that completed the request and by a store's answer to a
	// duplicate. A different request reusing the key gets 422 from the
	// cache, and an unreplayable record 409, again without a store call.
	for _, filledBy := range []string{"completing it", "a replay from the store"} {
		t.Run("filled by "+filledBy, func(t *testing.T) {
			s := &countingStore{Store: store.NewMemory()}
			h := &paymentHandler{}
			var observed observations
			cached := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(10, time.Hour), observed.option())(h)
			uncached := idempotency.New(idempotency.WithStore(s))(h)
			first := cached
			if filledBy != "completing it" {
				first = uncached
			}
			require.Equal(t, http.StatusCreated, postFor(t, first, "k", `{"n":1}`).status)
			fromStore := postFor(t, uncached, "k", `{"n":1}`)
			postFor(t, cached, "k", `{"n":1}`) // filled by now, whichever way

			var fromCache exchangeOf
			require.Zero(t, s.callsOf(func() { fromCache = postFor(t, cached, "k", `{"n":1}`) }), "store calls of a cached replay")
			assert.Equal(t, fromStore, fromCache)
			assert.Equal(t, "true", fromCache.header.Get("Idempotent-Replayed"))

			require.Zero(t, s.callsOf(func() {
				requireProblem(t, post(cached, "k", `{"n":2}`), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
			}), "store calls of a cached 422")
			assert.Equal(t, int64(1), h.runs.Load())
			outcomes := observed.outcomes()
			assert.Equal(t, 1, outcomes[idempotency.OutcomeKeyReused])
			assert.GreaterOrEqual(t, outcomes[idempotency.OutcomeReplayed], 2)
		})
	}

	// A duplicate answered from the cache is compared with the original's
	// fingerprint as one answered from the store is: for each request sent
	// with the completed key, the cached middleware answers without a store
	// call what the uncached one answers from the store, and the handler
	// never runs again.
	for _, config := range []struct {
		name string
		opts []idempotency.Option
	}{
		{"default fingerprint", nil},
		{"canonical JSON", []idempotency.Option{idempotency.WithCanonicalJSON()}},
	} {
		for _, tc := range []struct {
			name, target, body string
			edit               func(*http.Request)
			// The problem each fingerprint answers with; "" for a replay.
			problem, canonicalProblem string
		}{
			{"the same request", "/payments", `{"a":1,"b":2}`, nil, "", ""},
			{"another body", "/payments", `{"a":1,"b":3}`, nil, idempotency.ProblemKeyReused, idempotency.ProblemKeyReused},
			{"another query", "/payments?currency=eur", `{"a":1,"b":2}`, nil, idempotency.ProblemKeyReused, idempotency.ProblemKeyReused},
			{"another content type", "/payments", `{"a":1,"b":2}`, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
				idempotency.ProblemKeyReused, idempotency.ProblemKeyReused},
			{"the same JSON reordered", "/payments", `{ "b":2, "a":1 }`, nil, idempotency.ProblemKeyReused, ""},
		} {
			t.Run(config.name+": "+tc.name, func(t *testing.T) {
				s := &countingStore{Store: store.NewMemory()}
				h := &paymentHandler{}
				cached := idempotency.New(append([]idempotency.Option{idempotency.WithStore(s), idempotency.WithReplayCache(10, time.Hour)}, config.opts...)...)(h)
				uncached := idempotency.New(append([]idempotency.Option{idempotency.WithStore(s)}, config.opts...)...)(h)
				var edits []func(*http.Request)
				if tc.edit != nil {
					edits = append(edits, tc.edit)
				}
				send := func(mw http.Handler) exchangeOf {
					resp := serve(mw, http.MethodPost, tc.target, "k", tc.body, edits...)
					return exchangeOf{resp.StatusCode, resp.Header, readAll(t, resp)}
				}
				require.Equal(t, http.StatusCreated, postFor(t, cached, "k", `{"a":1,"b":2}`).status)

				var fromCache exchangeOf
				require.Zero(t, s.callsOf(func() { fromCache = send(cached) }), "store calls of a cached answer")
				assert.Equal(t, send(uncached), fromCache, "the store's answer")

				problem := tc.problem
				if config.opts != nil {
					problem = tc.canonicalProblem
				}
				if problem == "" {
					assert.Equal(t, http.StatusCreated, fromCache.status)
					assert.Equal(t, "true", fromCache.header.Get("Idempotent-Replayed"))
				} else {
					assert.Equal(t, http.StatusUnprocessableEntity, fromCache.status)
					assert.Contains(t, fromCache.body, `"type":"`+problem+`"`)
				}
				assert.Equal(t, int64(1), h.runs.Load(), "handler runs")
			})
		}
	}

	// A middleware outside that changes the replayed header's values in
	// place changes nothing the cache keeps.
	t.Run("a replay's header is a copy", func(t *testing.T) {
		cached := idempotency.New(idempotency.WithReplayCache(10, time.Hour))(&paymentHandler{})
		outside := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cached.ServeHTTP(w, r)
			for _, values := range w.Header() {
				for i := range values {
					values[i] = "changed"
				}
			}
		})
		require.Equal(t, http.StatusCreated, post(outside, "k", "{}").StatusCode)
		post(outside, "k", "{}")
		assert.Equal(t, "/payments/1", post(cached, "k", "{}").Header.Get("Location"))
	})

	// With the memory store itself the option does nothing: a response
	// over the store's byte cap, kept unreplayable, is not replayed from
	// the cache either.
	t.Run("a memory store's byte cap holds", func(t *testing.T) {
		mw := idempotency.New(idempotency.WithStore(store.NewMemory(store.WithMaxBytes(1024))),
			idempotency.WithReplayCache(10, time.Hour))(&largeResponse{size: 4096})
		require.Equal(t, http.StatusOK, post(mw, "k", "{}").StatusCode)
		requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemNotReplayable)
	})

	t.Run("an unreplayable record gets 409 from the cache", func(t *testing.T) {
		s := &countingStore{Store: store.NewMemory()}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(10, time.Hour),
			idempotency.WithMaxResponseBytes(1))(&paymentHandler{})
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
		require.Zero(t, s.callsOf(func() {
			requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemNotReplayable)
		}))
	})

	t.Run("the transactional store's commit fills it", func(t *testing.T) {
		s := &txMemory{Memory: store.NewMemory()}
		var observed observations
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(10, time.Hour), observed.option())(&paymentHandler{})
		first := postFor(t, mw, "k", "{}")
		require.Equal(t, http.StatusCreated, first.status)
		before := len(observed.storeOps())
		replay := postFor(t, mw, "k", "{}")
		assert.Equal(t, first.body, replay.body)
		assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		assert.Len(t, observed.storeOps(), before, "store calls of a cached replay")
	})

	// An entry ends at maxAge, and at the retention the store reported
	// (or, for a record completed here, the retention it was given): the
	// store is asked again then, and with the record gone, the request runs
	// again.
	for _, tc := range []struct {
		name           string
		maxAge, retain time.Duration
		runsAfter      int64
	}{
		{"at maxAge", 300 * time.Millisecond, time.Hour, 1},
		{"at the store's retention", time.Hour, 300 * time.Millisecond, 2},
	} {
		for _, filledBy := range []string{"completing it", "a replay from the store"} {
			t.Run("an entry ends "+tc.name+", filled by "+filledBy, func(t *testing.T) {
				t.Parallel()
				s := &countingStore{Store: store.NewMemory()}
				h := &paymentHandler{}
				cached := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(10, tc.maxAge),
					idempotency.WithRetention(tc.retain))(h)
				first := cached
				if filledBy != "completing it" {
					first = idempotency.New(idempotency.WithStore(s), idempotency.WithRetention(tc.retain))(h)
				}
				require.Equal(t, http.StatusCreated, post(first, "k", "{}").StatusCode)
				post(cached, "k", "{}")
				require.Zero(t, s.callsOf(func() { post(cached, "k", "{}") }), "a replay within the bounds")
				time.Sleep(2 * min(tc.maxAge, tc.retain))
				require.NotZero(t, s.callsOf(func() { post(cached, "k", "{}") }), "a request past the entry's end")
				assert.Equal(t, tc.runsAfter, h.runs.Load())
			})
		}
	}

	// The cache holds at most entries records: of many completed keys, at
	// most that many are then replayed without a store call (newest first:
	// the last one completed is still kept).
	t.Run("the size bound holds", func(t *testing.T) {
		const entries, keys = 8, 200
		s := &countingStore{Store: store.NewMemory()}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayCache(entries, time.Hour))(&paymentHandler{})
		for i := range keys {
			require.Equal(t, http.StatusCreated, post(mw, fmt.Sprint("k", i), "{}").StatusCode)
		}
		cached := 0
		for i := keys - 1; i >= 0; i-- {
			if s.callsOf(func() { post(mw, fmt.Sprint("k", i), "{}") }) == 0 {
				cached++
			}
		}
		assert.LessOrEqual(t, cached, entries)
		assert.Positive(t, cached)
	})

	// Many goroutines complete and replay keys of their own at once, on a
	// cache small enough that they evict one another's entries: every key
	// runs once, and every replay is its own key's response.
	t.Run("concurrent completions and replays", func(t *testing.T) {
		const goroutines, keys = 16, 40
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithReplayCache(keys, time.Hour))(h)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range keys {
					key := fmt.Sprintf("g%d-i%d", g, i)
					body := `{"key":"` + key + `"}`
					for range 3 {
						w := httptest.NewRecorder()
						r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
						r.Header.Set("Idempotency-Key", key)
						mw.ServeHTTP(w, r)
						if w.Code != http.StatusCreated || w.Body.String() != body {
							t.Errorf("key %s: %d %q", key, w.Code, w.Body.String())
						}
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(goroutines*keys), h.runs.Load())
	})
}

// largeResponse answers 200 with a body of size bytes.
type largeResponse struct{ size int }

func (h *largeResponse) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte(strings.Repeat("x", h.size)))
}
