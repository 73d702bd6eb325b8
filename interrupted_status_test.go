package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestRecordable4xxBeforeDisconnectIsReleased: only a 2xx or 3xx written
// before the request's context ended counts as finished work. A 422 that
// would otherwise be recorded is released when the context ends before the
// handler returns, so the retry runs the handler again instead of
// replaying the 422.
func TestRecordable4xxBeforeDisconnectIsReleased(t *testing.T) {
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
}
