package idempotency_test

import (
	"context"
	"net/http"
	"strings"
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
