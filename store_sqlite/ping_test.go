package sqlitestore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPing: a store is ready once its file holds the table, and not on a
// file not yet migrated nor through a closed handle.
func TestPing(t *testing.T) {
	path := testFile(t)
	s := New(openTestDB(t, path))
	require.ErrorContains(t, s.Ping(t.Context()), "sqlitestore: ping")
	require.NoError(t, s.Migrate(t.Context()))
	require.NoError(t, s.Ping(t.Context()))

	db, err := Open(context.Background(), path, 0)
	require.NoError(t, err)
	closed := New(db)
	require.NoError(t, closed.Ping(t.Context()))
	require.NoError(t, db.Close())
	require.ErrorContains(t, closed.Ping(t.Context()), "sqlitestore: ping")
}
