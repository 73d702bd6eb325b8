package mysqlstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestOwnsAnUnchangedRow: an owner statement that changed no row (a DSN
// without clientFoundRows counts a row left as it was as none) still
// succeeds where the owner's row is as the call leaves it.
func TestOwnsAnUnchangedRow(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	rec := mustClaim(t, s, "k", "fp", longLease)
	row := rowKey("k")
	require.NoError(t, s.owns(ctx, row, rec.Owner, stillInFlight))
	require.ErrorIs(t, s.owns(ctx, row, rec.Owner, alreadyDone), store.ErrNotOwner)
	require.ErrorIs(t, s.owns(ctx, row, rec.Owner, never), store.ErrNotOwner)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, nil, longLease))
	require.NoError(t, s.owns(ctx, row, rec.Owner, alreadyDone))
	require.ErrorIs(t, s.owns(ctx, row, rec.Owner, stillInFlight), store.ErrNotOwner)
	require.ErrorIs(t, s.owns(ctx, row, store.Lease{Token: "other", Fence: rec.Owner.Fence}, alreadyDone), store.ErrNotOwner)
}
