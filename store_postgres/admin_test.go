package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestAdminConformance runs storetest.RunAdmin against each of plainStores.
func TestAdminConformance(t *testing.T) {
	for _, c := range plainStores {
		t.Run(c.name, func(t *testing.T) {
			storetest.RunAdmin(t, func(t *testing.T) store.Admin { return c.newStore(t).(store.Admin) })
		})
	}
}

// TestAdminOnKeyHeldByTransaction: a key an open transaction holds is
// reported in flight, and neither delete, forced or not, touches it.
func TestAdminOnKeyHeldByTransaction(t *testing.T) {
	s := newTestTxStore(t)
	_, rec, tx, err := s.BeginClaim(t.Context(), "k", "fp", "token")
	require.NoError(t, err)
	require.Equal(t, store.StateInFlight, rec.State)
	hash := store.HashKey("k")

	got, found, err := s.Inspect(t.Context(), hash)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, store.Record{State: store.StateInFlight}, got)
	for _, force := range []bool{false, true} {
		deleted, err := s.Delete(t.Context(), hash, force)
		require.ErrorIs(t, err, store.ErrLeaseLive, "force %v", force)
		require.False(t, deleted)
	}
	require.NoError(t, tx.Commit(t.Context(), &store.Response{Status: 201}, time.Hour))
	got, found, err = s.Inspect(t.Context(), hash)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, store.StateCompleted, got.State)
}
