package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestSameKeyWithTwoMethodsDoesNotCollide: the method is part of the
// stored key, so one client key sent with POST and then with PATCH to the
// same path names two records: both run the handler, and the PATCH is
// neither replayed nor refused as a different request (422).
func TestSameKeyWithTwoMethodsDoesNotCollide(t *testing.T) {
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
}
