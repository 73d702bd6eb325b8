package idempotency_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestMethods: which methods the middleware protects, and that the method
// is part of the stored key.
func TestMethods(t *testing.T) {
	t.Run("unprotected methods pass through", func(t *testing.T) {
		h := &paymentHandler{status: http.StatusOK}
		mw := idempotency.New()(h)
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			for range 2 {
				resp := serve(mw, method, "/payments", "key-1", "")
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
			}
		}
		require.EqualValues(t, 6, h.runs.Load())
	})

	t.Run("protected by default", func(t *testing.T) {
		for _, method := range []string{http.MethodPost, http.MethodPatch} {
			t.Run(method, func(t *testing.T) {
				h := &paymentHandler{}
				mw := idempotency.New()(h)
				require.Equal(t, http.StatusCreated, serve(mw, method, "/p", "k", "{}").StatusCode)
				resp := serve(mw, method, "/p", "k", "{}")
				require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
				require.EqualValues(t, 1, h.runs.Load())
			})
		}
	})

	t.Run("WithMethods", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithMethods(http.MethodPut))(h)
		serve(mw, http.MethodPut, "/p", "k", "{}")
		require.Equal(t, "true", serve(mw, http.MethodPut, "/p", "k", "{}").Header.Get("Idempotent-Replayed"))
		serve(mw, http.MethodPost, "/p", "k", "{}")
		serve(mw, http.MethodPost, "/p", "k", "{}")
		require.EqualValues(t, 3, h.runs.Load(), "PUT runs once, POST is no longer protected")
	})

	// TestSameKeyWithTwoMethodsDoesNotCollide: the method is part of the
	// stored key, so one client key sent with POST and then with PATCH to the
	// same path names two records: both run the handler, and the PATCH is
	// neither replayed nor refused as a different request (422).
	t.Run("same key with two methods does not collide", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New()(h)
		first := serve(mw, http.MethodPost, "/payments", "k", "{}")
		require.Equal(t, http.StatusCreated, first.StatusCode)
		second := serve(mw, http.MethodPatch, "/payments", "k", "{}")
		require.Equal(t, http.StatusCreated, second.StatusCode)
		require.Empty(t, second.Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 2, h.runs.Load())

		dup := serve(mw, http.MethodPatch, "/payments", "k", "{}")
		require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"), "each method's record is kept")
		require.EqualValues(t, 2, h.runs.Load())
	})
}

// TestKeys: how the Idempotency-Key header is read, and what a request
// without one gets.
func TestKeys(t *testing.T) {
	t.Run("bare and quoted are the same key", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New()(h)
		require.Equal(t, http.StatusCreated, post(mw, "abc-123", `{"a":1}`).StatusCode)
		resp := post(mw, `"abc-123"`, `{"a":1}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("invalid keys get 400", func(t *testing.T) {
		cases := map[string]func(*http.Request){
			"empty":         func(r *http.Request) { r.Header["Idempotency-Key"] = []string{""} },
			"256 bytes":     func(r *http.Request) { r.Header.Set("Idempotency-Key", strings.Repeat("k", 256)) },
			"control char":  func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a\x01b"} },
			"newline":       func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a\r\nb"} },
			"non-ASCII":     func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"clé"} },
			"space in bare": func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a b"} },
			"unterminated":  func(r *http.Request) { r.Header["Idempotency-Key"] = []string{`"abc`} },
			"two lines":     func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a", "b"} },
		}
		for name, edit := range cases {
			t.Run(name, func(t *testing.T) {
				h := &paymentHandler{}
				mw := idempotency.New()(h)
				requireProblem(t, post(mw, "", "{}", edit), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
				require.Zero(t, h.runs.Load())
			})
		}
	})

	t.Run("longest valid key", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New()(h)
		key := strings.Repeat("k", 255)
		post(mw, key, "{}")
		require.Equal(t, "true", post(mw, key, "{}").Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("missing key passes through by default", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New()(h)
		post(mw, "", "{}")
		resp := post(mw, "", "{}")
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 2, h.runs.Load())
	})

	t.Run("missing key required", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithKeyRequired())(h)
		requireProblem(t, post(mw, "", "{}"), http.StatusBadRequest, idempotency.ProblemKeyMissing)
		require.Zero(t, h.runs.Load())
	})
}

// TestKeyOptions: the key header the application names, and its validator.
func TestKeyOptions(t *testing.T) {
	inHeader := func(name, key string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set(name, key) }
	}
	t.Run("another header", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithKeyHeader("x-idempotency-key"), idempotency.WithKeyRequired())(h)
		require.Equal(t, http.StatusCreated, post(mw, "", "{}", inHeader("X-Idempotency-Key", "k")).StatusCode)
		dup := post(mw, "", "{}", inHeader("X-Idempotency-Key", `"k"`))
		require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 1, h.runs.Load())

		missing := post(mw, "k", "{}") // in Idempotency-Key, which no longer counts
		require.Equal(t, http.StatusBadRequest, missing.StatusCode)
		body := readAll(t, missing)
		require.Contains(t, body, idempotency.ProblemKeyMissing)
		require.Contains(t, body, "X-Idempotency-Key header", "the problem names the header to send")
		require.NotContains(t, body, `"Idempotency-Key`)
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("validator", func(t *testing.T) {
		var calls atomic.Int64
		uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithKeyValidator(func(key string) bool {
			calls.Add(1)
			return uuid.MatchString(key)
		}))(h)
		requireProblem(t, post(mw, "pay-1", "{}"), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
		requireProblem(t, post(mw, "a\x01", "{}"), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
		require.EqualValues(t, 1, calls.Load(), "a malformed key is refused before the validator")
		require.Zero(t, h.runs.Load())
		const key = "0b5d7a3e-9c1f-4e2a-8d6b-3f4a5b6c7d8e"
		require.Equal(t, http.StatusCreated, post(mw, `"`+key+`"`, "{}").StatusCode, "it gets the key unquoted")
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("validator that panics claims nothing", func(t *testing.T) {
		var panics atomic.Bool
		panics.Store(true)
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithKeyValidator(func(string) bool {
			if panics.Load() {
				panic("validator bug")
			}
			return true
		}))(h)
		require.PanicsWithValue(t, "validator bug", func() { post(mw, "k", "{}") })
		require.Zero(t, h.runs.Load())
		panics.Store(false)
		first := post(mw, "k", "{}")
		require.Equal(t, http.StatusCreated, first.StatusCode, "the key was never claimed")
		require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	})
}

// TestScopeRequired: with WithScopeRequired, a request with a key but no
// caller gets 403 and claims nothing; one without a key still passes.
func TestScopeRequired(t *testing.T) {
	h := &paymentHandler{}
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	mw := idempotency.New(idempotency.WithScope(user), idempotency.WithScopeRequired())(h)
	alice := func(r *http.Request) { r.Header.Set("X-User", "alice") }
	requireProblem(t, post(mw, "k", "{}"), http.StatusForbidden, idempotency.ProblemScopeMissing)
	require.Zero(t, h.runs.Load())
	first := post(mw, "k", "{}", alice)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"), "the refused request claimed nothing")
	require.Equal(t, http.StatusCreated, post(mw, "", "{}").StatusCode, "no key: not protected, not refused")
	require.EqualValues(t, 2, h.runs.Load())
}

func TestSameKeyFromTwoScopesDoesNotCollide(t *testing.T) {
	h := &paymentHandler{}
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	mw := idempotency.New(idempotency.WithScope(user))(h)
	as := func(name string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-User", name) }
	}
	post(mw, "k", `{"x":1}`, as("alice"))
	resp := post(mw, "k", `{"x":1}`, as("bob"))
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "bob must not see alice's response")
	require.Equal(t, "true", post(mw, "k", `{"x":1}`, as("alice")).Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, h.runs.Load())
}

func (s forgetfulStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	rec, claimed, err := s.Store.Claim(ctx, key, fp, token, lease)
	if err == nil && !claimed {
		rec.State, rec.Response = store.StateCompleted, nil
	}
	return rec, claimed, err
}

func (s *cancellingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.cancel()
	return store.Record{}, false, ctx.Err()
}
