package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestTxOversizedResponseIsNotReplayable: in transactional mode too, a
// response over WithMaxResponseBytes reaches the client in full and the
// handler's writes are committed, but the key is marked done but not
// replayable: a duplicate gets 409 not-replayable and the handler does not
// run again.
func TestTxOversizedResponseIsNotReplayable(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	var status atomic.Int64
	status.Store(http.StatusCreated)
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithMaxResponseBytes(4))(ledgerHandler(&status))
	first := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "/payments/1", first.Header.Get("Location"))
	require.Equal(t, `{"id":1}`, readAll(t, first), "the whole body, over the limit, is sent")
	require.Equal(t, []string{"payment"}, s.committed())

	dup := post(mw, "k", "{}")
	requireProblem(t, dup, http.StatusConflict, idempotency.ProblemNotReplayable)
	require.Equal(t, []string{"payment"}, s.committed(), "the handler did not run again")
}
