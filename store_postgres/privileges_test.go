package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestLeastPrivilegedRole checks the privileges docs/postgres.md lists: a role
// with USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on the table
// runs every operation, and Migrate once the table exists, but cannot
// create the table itself.
func TestLeastPrivilegedRole(t *testing.T) {
	t.Parallel()
	admin := testPool(t)
	ctx := context.Background()
	role, schema := testTable(t), testTable(t)
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"CREATE SCHEMA " + schema,
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
	} {
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP SCHEMA " + schema + " CASCADE", "DROP ROLE " + role} {
			_, err := admin.Exec(context.Background(), sql)
			assert.NoError(t, err, sql)
		}
	})

	cfg := testConfig(t)
	cfg.ConnConfig.User = role
	cfg.MaxConns = 2
	p := connect(t, cfg)
	t.Cleanup(p.Close)
	s := New(p, WithSchema(schema))
	require.ErrorContains(t, s.Migrate(ctx), "permission denied", "creating the table needs CREATE on the schema")

	require.NoError(t, New(admin, WithSchema(schema)).Migrate(ctx))
	_, err := admin.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+s.name+" TO "+role)
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx), "Migrate on an existing table needs no CREATE")
	rec, claimed, err := s.Claim(ctx, "k", "fp", "t", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, s.Renew(ctx, "k", rec.Owner, time.Minute))
	require.NoError(t, s.Release(ctx, "k", rec.Owner))
	rec, _, err = s.Claim(ctx, "k", "fp", "t", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 201}, time.Microsecond))
	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}
