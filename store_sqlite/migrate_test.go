package sqlitestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
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

// TestMigrateAddsSteps: a table made before steps (schema.sql alone)
// gets the steps and completed_at columns from Migrate, its records kept,
// and its keys then keep steps.
func TestMigrateAddsSteps(t *testing.T) {
	path := testFile(t)
	db := openTestDB(t, path)
	_, err := db.Exec(schemaSQL)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO idempotency_keys (key, fingerprint, state, token, fence, expires_at, sweep_at)
VALUES (?, CAST('fp' AS BLOB), 1, CAST('t' AS BLOB), 1, 1e14, 1e14)`, store.HashKey("old"))
	require.NoError(t, err)
	s := New(db)
	old := store.Lease{Token: "t", Fence: 1}

	require.NoError(t, s.Migrate(t.Context()))
	var columns string
	require.NoError(t, db.QueryRow(`SELECT group_concat(name) FROM pragma_table_info('idempotency_keys')`).Scan(&columns))
	require.True(t, strings.HasSuffix(columns, ",steps,completed_at"), "columns: %s", columns)
	require.NoError(t, s.SaveStep(t.Context(), "old", old, store.Step{Name: "charge", Result: []byte("ok")}))
	require.NoError(t, s.Migrate(t.Context()), "Migrate on a migrated table changes nothing")
	rec, claimed, err := s.Claim(t.Context(), "old", "fp", old.Token, time.Minute)
	require.NoError(t, err)
	require.True(t, claimed, "the record survives, claimed again by its owner")
	require.Equal(t, []store.Step{{Name: "charge", Result: []byte("ok")}}, rec.Steps)
}
