package idempotency_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestBodyReachesHandlerIntact(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	body := strings.Repeat(`{"k":"v"}`, 1000)
	require.Equal(t, body, readAll(t, post(mw, "k", body)))
}

func TestOversizedBodyGets413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithMaxBodyBytes(10))(h)
	require.Equal(t, http.StatusCreated, post(mw, "at-limit", "0123456789").StatusCode)
	requireProblem(t, post(mw, "k", "0123456789x"), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	unknownLength := func(r *http.Request) { r.ContentLength = -1 }
	requireProblem(t, post(mw, "k2", "0123456789x", unknownLength), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.EqualValues(t, 1, h.runs.Load())
	require.Equal(t, http.StatusCreated, post(mw, "k", "small").StatusCode, "a 413 leaves the key unused")
}
