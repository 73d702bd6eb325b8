package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// durationStore is a memory store that records the lease of every Claim
// and the retention of every Complete.
type durationStore struct {
	store.Store
	mu         sync.Mutex
	leases     []time.Duration
	retentions []time.Duration
}

func (s *durationStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	s.leases = append(s.leases, lease)
	s.mu.Unlock()
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *durationStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	s.mu.Lock()
	s.retentions = append(s.retentions, retention)
	s.mu.Unlock()
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

// TestDefaults: what the middleware does when no option says otherwise.
func TestDefaults(t *testing.T) {
	// TestDefaultLeaseAndRetention: without options a claim holds its key for
	// a 30 second lease, and a completed record is kept for 24 hours.
	t.Run("lease and retention", func(t *testing.T) {
		s := &durationStore{Store: store.NewMemory()}
		mw := idempotency.New(idempotency.WithStore(s))(&paymentHandler{})
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Equal(t, []time.Duration{30 * time.Second}, s.leases)
		require.Equal(t, []time.Duration{24 * time.Hour}, s.retentions)
	})

	// TestDefaultBodyLimitIsOneMiB: without options a request body of exactly
	// 1 MiB is read and handed on whole, and one byte more gets 413 without
	// running the handler.
	t.Run("body limit is 1 MiB", func(t *testing.T) {
		var runs int
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			_, _ = w.Write([]byte(strconv.Itoa(len(body))))
		})
		mw := idempotency.New()(h)
		atLimit := post(mw, "a", strings.Repeat("x", 1<<20))
		require.Equal(t, http.StatusOK, atLimit.StatusCode)
		require.Equal(t, strconv.Itoa(1<<20), readAll(t, atLimit))

		requireProblem(t, post(mw, "b", strings.Repeat("x", 1<<20+1)),
			http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
		require.Equal(t, 1, runs)
	})

	// TestDefaultResponseLimitIsOneMiB: without options a response body of
	// exactly 1 MiB is stored and replayed; one byte more still reaches the
	// client in full, but its key is done but not replayable: the duplicate
	// gets 409 not-replayable and the handler does not run again.
	t.Run("response limit is 1 MiB", func(t *testing.T) {
		for _, size := range []int{1 << 20, 1<<20 + 1} {
			var runs int
			body := strings.Repeat("y", size)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, body)
			})
			mw := idempotency.New()(h)
			first := post(mw, "k", "{}")
			require.Equal(t, http.StatusCreated, first.StatusCode)
			require.Equal(t, size, len(readAll(t, first)), "size %d: the client gets the whole body", size)

			dup := post(mw, "k", "{}")
			if size <= 1<<20 {
				require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"), "size %d", size)
				require.Equal(t, size, len(readAll(t, dup)), "size %d", size)
			} else {
				requireProblem(t, dup, http.StatusConflict, idempotency.ProblemNotReplayable)
			}
			require.Equal(t, 1, runs, "size %d", size)
		}
	})
}

// TestOptionsRefuseMisconfiguration: an option given a value that cannot
// work panics when the option is made or the middleware is built, never at
// a request.
func TestOptionsRefuseMisconfiguration(t *testing.T) {
	// Sizes and durations must be above zero; each option says which.
	t.Run("sizes and durations refuse zero", func(t *testing.T) {
		for want, option := range map[string]func(){
			"idempotency: WithMaxBodyBytes expects n > 0":      func() { idempotency.WithMaxBodyBytes(0) },
			"idempotency: WithMaxResponseBytes expects n > 0":  func() { idempotency.WithMaxResponseBytes(-1) },
			"idempotency: WithLease expects d > 0":             func() { idempotency.WithLease(0) },
			"idempotency: WithRetention expects d > 0":         func() { idempotency.WithRetention(-time.Second) },
			"idempotency: WithRetryAfter expects d > 0":        func() { idempotency.WithRetryAfter(0) },
			"idempotency: WithReplayCache expects entries > 0": func() { idempotency.WithReplayCache(0, time.Minute) },
			"idempotency: WithReplayCache expects maxAge > 0":  func() { idempotency.WithReplayCache(1, -time.Second) },
		} {
			require.PanicsWithValue(t, want, option)
		}
		require.NotPanics(t, func() { idempotency.WithLease(time.Nanosecond) })
	})

	// TestWithStoreRefusesANilStore: a nil store, or a nil pointer to one,
	// panics when the option is made rather than at the first request.
	t.Run("WithStore refuses a nil store", func(t *testing.T) {
		require.Panics(t, func() { idempotency.WithStore(nil) })
		var never *store.Memory
		require.Panics(t, func() { idempotency.WithStore(never) })
		require.NotPanics(t, func() { idempotency.WithStore(store.NewMemory()) })
	})

	// TestWithMethodsRefusesAStandardMethodInAnotherCase: methods are
	// case-sensitive, so "post" would protect nothing: WithMethods panics,
	// naming the spelling to use; an empty method panics too, while a custom
	// method in any case is accepted.
	t.Run("WithMethods refuses a standard method in another case", func(t *testing.T) {
		require.PanicsWithValue(t,
			`idempotency: WithMethods: methods are case-sensitive; "post" would protect nothing, use "POST"`,
			func() { idempotency.WithMethods(http.MethodPut, "post") })
		require.PanicsWithValue(t, "idempotency: WithMethods expects non-empty methods",
			func() { idempotency.WithMethods("") })
		require.NotPanics(t, func() { idempotency.WithMethods("PURGE", "report") })
	})

	// A store timeout must be shorter than the lease, for the middleware
	// and for Do: a claim answered late still leaves time to renew.
	t.Run("store timeouts refuse zero and the lease", func(t *testing.T) {
		noop := func(context.Context) ([]byte, error) { return nil, nil }
		for want, option := range map[string]func(){
			"idempotency: WithStoreTimeout expects d > 0": func() { idempotency.WithStoreTimeout(0) },
			"idempotency: DoStoreTimeout expects d > 0":   func() { idempotency.DoStoreTimeout(-time.Second) },
			"idempotency: WithStoreTimeout expects a timeout shorter than the lease (WithLease)": func() {
				idempotency.New(idempotency.WithStoreTimeout(time.Second), idempotency.WithLease(time.Second))
			},
			"idempotency: DoStoreTimeout expects a timeout shorter than the lease (DoLease)": func() {
				_, _ = idempotency.Do(context.Background(), store.NewMemory(), "k", noop,
					idempotency.DoStoreTimeout(time.Minute))
			},
		} {
			require.PanicsWithValue(t, want, option)
		}
		require.NotPanics(t, func() { idempotency.New(idempotency.WithLease(time.Nanosecond)) })
	})

	t.Run("WithReplayHeaders refuses credentials", func(t *testing.T) {
		require.PanicsWithValue(t, "idempotency: WithReplayHeaders: Set-Cookie is never stored", func() {
			idempotency.New(idempotency.WithReplayHeaders("set-cookie"))
		})
	})

	// Function options refuse nil, WithKeyHeader a name that is no header
	// name, and WithScopeRequired a middleware without a scope function.
	t.Run("the options of issue 16", func(t *testing.T) {
		for want, option := range map[string]func(){
			"idempotency: WithRecordPolicy expects a non-nil function":  func() { idempotency.WithRecordPolicy(nil) },
			"idempotency: WithProblemWriter expects a non-nil function": func() { idempotency.WithProblemWriter(nil) },
			"idempotency: WithKeyValidator expects a non-nil function":  func() { idempotency.WithKeyValidator(nil) },
			"idempotency: WithKeyFunc expects a non-nil function":       func() { idempotency.WithKeyFunc(nil) },
			"idempotency: KeyFromJSONField expects a member name":       func() { idempotency.KeyFromJSONField("") },
			`idempotency: WithKeyHeader: "" is not a header name`:       func() { idempotency.WithKeyHeader("") },
			`idempotency: WithKeyHeader: "Idempotency Key" is not a header name`: func() {
				idempotency.WithKeyHeader("Idempotency Key")
			},
			`idempotency: WithKeyHeader: "Key:" is not a header name`: func() { idempotency.WithKeyHeader("Key:") },
			"idempotency: WithScopeRequired needs WithScope, the function that names the caller": func() {
				idempotency.New(idempotency.WithScopeRequired())
			},
		} {
			require.PanicsWithValue(t, want, option)
		}
		require.NotPanics(t, func() { idempotency.WithKeyHeader("x-idempotency-key") })
	})

	// TestWithReplayHeadersRefusesEveryNeverStoredHeader: naming any header
	// that is never stored in WithReplayHeaders, in any letter case, is a
	// misconfiguration and panics when the middleware is built.
	t.Run("WithReplayHeaders refuses every never-stored header", func(t *testing.T) {
		for _, name := range neverStoredHeaders {
			for _, spelling := range []string{name, http.CanonicalHeaderKey(name)} {
				require.Panics(t, func() { idempotency.New(idempotency.WithReplayHeaders(spelling)) }, spelling)
			}
		}
	})
}

// silentStore claims as the memory store does, then never answers a call
// that records an outcome until its caller gives up, as a store cut off
// after the claim does.
type silentStore struct{ store.Store }

func (silentStore) Complete(ctx context.Context, _ string, _ store.Lease, _ *store.Response, _ time.Duration) error {
	return stall(ctx)
}

func (silentStore) Release(ctx context.Context, _ string, _ store.Lease) error { return stall(ctx) }

// silentTxStore is silentStore for a store that claims in a transaction:
// Commit and Rollback never answer.
type silentTxStore struct{ *txMemory }

func (s silentTxStore) BeginClaim(ctx context.Context, key, fp, token string) (context.Context, store.Record, store.Tx, error) {
	txCtx, rec, tx, err := s.txMemory.BeginClaim(ctx, key, fp, token)
	if tx != nil {
		tx = silentTx{}
	}
	return txCtx, rec, tx, err
}

type silentTx struct{}

func (silentTx) Commit(ctx context.Context, _ *store.Response, _ time.Duration) error {
	return stall(ctx)
}

func (silentTx) Rollback(ctx context.Context) error { return stall(ctx) }

// TestWithRecordTimeout: a store call that records the outcome and gets
// no answer gives up after the record timeout, or by default after the
// lease: the request returns, the error handler is told of the deadline,
// and a transactional request whose commit timed out gets 503.
func TestWithRecordTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name       string
		store      store.Store
		opt        idempotency.Option
		status     int // the handler's
		call       string
		wantStatus int // the client's
	}{
		{"complete, by default within the lease", silentStore{store.NewMemory()}, idempotency.WithLease(timeout),
			http.StatusCreated, "complete", http.StatusCreated},
		{"release", silentStore{store.NewMemory()}, idempotency.WithRecordTimeout(timeout),
			http.StatusInternalServerError, "release", http.StatusInternalServerError},
		{"commit", silentTxStore{&txMemory{Memory: store.NewMemory()}}, idempotency.WithRecordTimeout(timeout),
			http.StatusCreated, "commit", http.StatusServiceUnavailable},
		{"rollback", silentTxStore{&txMemory{Memory: store.NewMemory()}}, idempotency.WithRecordTimeout(timeout),
			http.StatusInternalServerError, "rollback", http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log errorLog
			mw := idempotency.New(idempotency.WithStore(tc.store), tc.opt, log.option())(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) }))

			resp := postWithin(t, 50*timeout, mw, "k", "{}")
			require.Equal(t, tc.wantStatus, resp.StatusCode)
			if tc.wantStatus == http.StatusServiceUnavailable {
				requireProblem(t, resp, tc.wantStatus, idempotency.ProblemStoreUnavailable)
			}
			errs := log.all()
			require.Len(t, errs, 1)
			require.ErrorIs(t, errs[0], context.DeadlineExceeded)
			require.True(t, strings.HasPrefix(errs[0].Error(), "idempotency: "+tc.call+": "), "reported: %v", errs[0])
		})
	}

	t.Run("refuses a timeout that is not positive", func(t *testing.T) {
		for _, d := range []time.Duration{0, -time.Second} {
			require.PanicsWithValue(t, "idempotency: WithRecordTimeout expects d > 0", func() { idempotency.WithRecordTimeout(d) })
		}
	})
}

func TestCanonicalJSON(t *testing.T) {
	first := `{"amount": 100, "currency": "EUR", "meta": {"b": 1, "a": [1, 2]}}`
	reordered := "{\"currency\":\"EUR\",\n\"meta\":{\"a\":[1,2],\"b\":1},\"amount\":100}"

	h := &paymentHandler{}
	plain := idempotency.New()(h)
	post(plain, "k", first)
	require.Equal(t, http.StatusUnprocessableEntity, post(plain, "k", reordered).StatusCode,
		"without the option the body is hashed byte for byte")

	h = &paymentHandler{}
	canonical := idempotency.New(idempotency.WithCanonicalJSON())(h)
	post(canonical, "k", first)
	resp := post(canonical, "k", reordered)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first, readAll(t, resp), "the replay is the first response")
	require.Equal(t, http.StatusUnprocessableEntity, post(canonical, "k", `{"amount":101,"currency":"EUR"}`).StatusCode)
	require.EqualValues(t, 1, h.runs.Load())
}

func TestCanonicalJSONLeavesOtherBodiesAlone(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithCanonicalJSON())(h)
	post(mw, "k", `{"a":1} trailing`)
	assert.Equal(t, http.StatusUnprocessableEntity, post(mw, "k", `{"a":1}`).StatusCode)
	textBody := func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }
	post(mw, "t", `{"a":1,"b":2}`, textBody)
	assert.Equal(t, http.StatusUnprocessableEntity, post(mw, "t", `{"b":2,"a":1}`, textBody).StatusCode)
}

// TestCanonicalJSONKeepsDifferentBodiesApart: canonicalising never makes
// two different bodies one. Bodies that decoding would change (invalid
// UTF-8 and lone surrogates both read as U+FFFD, a repeated member name
// keeps only its last value) are fingerprinted as sent, so a retry that
// differs from its first request in those bytes gets 422, not a replay.
func TestCanonicalJSONKeepsDifferentBodiesApart(t *testing.T) {
	for name, bodies := range map[string][2]string{
		"invalid UTF-8":    {"{\"iban\":\"\xff\"}", "{\"iban\":\"\xfe\"}"},
		"lone surrogates":  {`{"iban":"\ud800"}`, `{"iban":"\udbff"}`},
		"U+FFFD itself":    {`{"iban":"\ufffd"}`, `{"iban":"\ud800"}`},
		"repeated member":  {`{"amount":100}`, `{"amount":1,"amount":100}`},
		"repeated, nested": {`{"a":{"b":2}}`, `{"a":{"b":1,"b":2}}`},
	} {
		t.Run(name, func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New(idempotency.WithCanonicalJSON())(h)
			require.Equal(t, http.StatusCreated, post(mw, "k", bodies[0]).StatusCode)
			requireProblem(t, post(mw, "k", bodies[1]), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
			require.EqualValues(t, 1, h.runs.Load())
		})
	}
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithCanonicalJSON())(h)
	post(mw, "k", `{"a":{"b":1},"c":[{"b":1}]}`)
	resp := post(mw, "k", `{"c":[{"b":1}],"a":{"b":1}}`)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "one name in sibling objects is not a repeat")
}
