package idempotency

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seed43327c4c/idempotency/internal/canonjson"
	"github.com/stretchr/testify/require"
)

// TestCanonicalJSONKeepsCaseVariantsApart: through the middleware, a
// payment that names its amount twice in two cases, retried with the two
// members swapped, is another request (encoding/json reads the later
// amount): 422, and the handler ran once.
func TestCanonicalJSONKeepsCaseVariantsApart(t *testing.T) {
	runs := 0
	mw := New(WithCanonicalJSON())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(body string) int {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		return w.Code
	}
	require.Equal(t, http.StatusCreated, post(`{"amount":5,"AMOUNT":7000}`))
	require.Equal(t, http.StatusUnprocessableEntity, post(`{"AMOUNT":7000,"amount":5}`))
	require.Equal(t, 1, runs)
}

// TestCanonicalJSONBodyLimit: New refuses WithCanonicalJSON beside a body
// limit over 2 GiB, whose positions canonicalJSON could not number, in
// either order, and takes a limit of 2 GiB less one byte.
func TestCanonicalJSONBodyLimit(t *testing.T) {
	require.Panics(t, func() { New(WithCanonicalJSON(), WithMaxBodyBytes(canonjson.MaxSize+1)) })
	require.Panics(t, func() { New(WithMaxBodyBytes(canonjson.MaxSize+1), WithCanonicalJSON()) })
	require.NotPanics(t, func() { New(WithCanonicalJSON(), WithMaxBodyBytes(canonjson.MaxSize)) })
	require.NotPanics(t, func() { New(WithMaxBodyBytes(canonjson.MaxSize + 1)) })
}
