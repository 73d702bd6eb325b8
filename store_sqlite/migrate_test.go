package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestMigrateConcurrently: several handles, as several processes have,
// open a new file and migrate it at once; all succeed, and the table is
// there once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	path := testFile(t)
	const handles = 8
	stores := make([]*Store, handles)
	errs := make([]error, handles)
	storetest.Together(handles, func(i int) {
		db, err := Open(context.Background(), path, 0)
		if err != nil {
			errs[i] = err
			return
		}
		t.Cleanup(func() { _ = db.Close() })
		stores[i] = New(db)
		errs[i] = stores[i].Migrate(context.Background())
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	mustClaim(t, stores[0], "k", "t", time.Minute)
	require.NoError(t, stores[1].Migrate(context.Background()), "Migrate on an existing table changes nothing")
	_, claimed, err := stores[1].Claim(context.Background(), "k", "fp", "other", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed, "the record survives a second Migrate")
}
