package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// testSchema creates a schema no other test uses through p and returns
// its name; it is dropped, with all it holds, when the test ends.
func testSchema(t *testing.T, p *pgxpool.Pool) string {
	t.Helper()
	schema := testTable(t)
	_, err := p.Exec(context.Background(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
	})
	return schema
}

// TestMigrateConcurrently: workers that call Migrate at once, half of them
// naming the table with its schema and half without, all succeed.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	for range 5 {
		name := testTable(t)
		s := New(p, WithTable(name))
		spellings := []*Store{s, New(p, WithTable(name), WithSchema("public"))}
		t.Cleanup(func() { dropTable(t, s) })
		const workers = 12
		errs := make([]error, workers)
		storetest.Together(workers, func(i int) { errs[i] = spellings[i%2].Migrate(ctx) })
		for _, err := range errs {
			require.NoError(t, err)
		}
		mustClaim(t, s, "k", "fp", "t", time.Minute)
		require.NoError(t, s.Migrate(ctx), "Migrate on an existing table changes nothing")
	}
}

// checksV1 adds to a table schema.sql made the CHECK constraints that
// schema version 1 had.
const checksV1 = `ALTER TABLE %s ADD CONSTRAINT key_is_sha256 CHECK (octet_length(key) = 32),
ADD CHECK (state IN (1, 2, 3))`

// TestMigrateFromVersion1: workers that call Migrate at once on a table of
// schema version 1, in a schema of its own and named with and without it,
// bring it to version 2 without its CHECK constraints, keeping its rows.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	schema := testSchema(t, p)
	s := New(p, WithSchema(schema), WithTable("keys"))
	_, err := p.Exec(ctx, s.sql.migrations[0])
	require.NoError(t, err)
	_, err = p.Exec(ctx, fmt.Sprintf(checksV1, s.name))
	require.NoError(t, err)
	_, err = p.Exec(ctx, `INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, expires_at)
VALUES ($1, 'fp', 1, 't', 1, now() + interval '1 minute')`, rowKey("k"))
	require.NoError(t, err)

	onPath := ownPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["search_path"] = schema })
	spellings := []*Store{s, New(onPath, WithTable("keys"))}
	const workers = 8
	errs := make([]error, workers)
	storetest.Together(workers, func(i int) { errs[i] = spellings[i%2].Migrate(ctx) })
	for _, err := range errs {
		require.NoError(t, err)
	}
	var checks int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`,
		s.name).Scan(&checks))
	assert.Zero(t, checks)
	rec, claimed, err := s.Claim(ctx, "k", "fp", "t", time.Minute)
	require.NoError(t, err)
	assert.True(t, claimed, "the version 1 row is kept: its owner claims it again")
	assert.Equal(t, int64(1), rec.Owner.Fence)
}

// TestMigrateFromVersion2: workers that call Migrate at once on a table of
// schema version 2 bring it to the current version, keeping its rows: a live owner
// records steps on its row, and a released row is taken over.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	s := New(p, WithTable(testTable(t)))
	t.Cleanup(func() { dropTable(t, s) })
	for _, sql := range s.sql.migrations[:2] {
		_, err := p.Exec(ctx, sql)
		require.NoError(t, err)
	}
	_, err := p.Exec(ctx, `INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, expires_at)
VALUES ($1, 'fp', 1, 't', 1, now() + interval '1 minute'), ($2, 'fp', 1, '', 4, now())`, rowKey("live"), rowKey("released"))
	require.NoError(t, err)

	const workers = 8
	errs := make([]error, workers)
	storetest.Together(workers, func(i int) { errs[i] = s.Migrate(ctx) })
	for _, err := range errs {
		require.NoError(t, err)
	}
	version, err := s.version(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, len(migrationsSQL), version)
	step := store.Step{Name: "charge", Result: []byte("ch_1")}
	require.NoError(t, s.SaveStep(ctx, "live", store.Lease{Token: "t", Fence: 1}, step))
	rec := mustClaim(t, s, "live", "fp", "t", time.Minute)
	assert.Equal(t, []store.Step{step}, rec.Steps, "the live owner's claim again")
	rec = mustClaim(t, s, "released", "fp", "t", time.Minute)
	assert.Equal(t, int64(5), rec.Owner.Fence, "the released row is taken over")
	assert.Empty(t, rec.Steps)
}

// TestMigrateFromVersion3: a row completed before schema version 4, which
// has no completion time, becomes a tombstone that names none.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	s := New(p, WithTable(testTable(t)), WithTombstones(time.Minute))
	t.Cleanup(func() { dropTable(t, s) })
	for _, sql := range s.sql.migrations[:3] {
		_, err := p.Exec(ctx, sql)
		require.NoError(t, err)
	}
	_, err := p.Exec(ctx, `INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, status, expires_at)
VALUES ($1, 'fp', 2, 't', 1, 200, now() - interval '1 second')`, rowKey("done"))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	rec, claimed, err := s.Claim(ctx, "done", "fp", "x", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateExpired, rec.State)
	assert.True(t, rec.Completed.IsZero())
}

// TestMigrateChecksVersion: Claim and BeginClaim refuse a table that is not
// at this package's schema version, and Migrate refuses one whose version
// it cannot tell or does not know.
func TestMigrateChecksVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, comment, migrateErr string
	}{
		{name: "no version", comment: "made by hand", migrateErr: "records no schema version"},
		{name: "later version", comment: "pgstore schema version 5", migrateErr: "later than this package's 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(testPool(t), WithTable(testTable(t)))
			t.Cleanup(func() { dropTable(t, s) })
			require.NoError(t, s.Migrate(ctx))
			_, err := s.pool.Exec(ctx, "COMMENT ON TABLE "+s.name+" IS '"+tc.comment+"'")
			require.NoError(t, err)
			tx := NewTx(s.pool, WithTable(s.table))
			for _, claim := range []func() error{
				func() error { _, _, err := s.Claim(ctx, "k", "fp", "x", time.Minute); return err },
				func() error { _, _, _, err := tx.BeginClaim(ctx, "k", "fp", "x"); return err },
			} {
				require.ErrorContains(t, claim(), tc.migrateErr)
			}
			require.ErrorContains(t, s.Migrate(ctx), tc.migrateErr)
		})
	}
	t.Run("missing table", func(t *testing.T) {
		t.Parallel()
		s := New(testPool(t), WithTable(testTable(t)))
		_, _, err := s.Claim(ctx, "k", "fp", "x", time.Minute)
		require.ErrorContains(t, err, "schema version 0, not 4: run Migrate")
	})
}

func TestMigrateInSchema(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	schema := testSchema(t, p)
	s := New(p, WithSchema(schema))
	require.NoError(t, s.Migrate(ctx))
	var n int
	require.NoError(t, p.QueryRow(ctx,
		`SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, schema, DefaultTable).Scan(&n))
	assert.Equal(t, 1, n, "the primary key, in the schema")
	mustClaim(t, s, "k", "fp", "t", time.Minute)
}

// TestLeastPrivilegedRole checks the privileges docs/postgres.md lists: a role
// with USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on the table
// runs every operation, and Migrate once the table exists, but cannot
// create the table itself.
func TestLeastPrivilegedRole(t *testing.T) {
	t.Parallel()
	admin := testPool(t)
	ctx := context.Background()
	role := testTable(t)
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP ROLE "+role)
		assert.NoError(t, err)
	})
	schema := testSchema(t, admin) // dropped before the role, which then holds no grant
	_, err = admin.Exec(ctx, "GRANT USAGE ON SCHEMA "+schema+" TO "+role)
	require.NoError(t, err)

	p := ownPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.User = role
		cfg.MaxConns = 2
	})
	s := New(p, WithSchema(schema))
	require.ErrorContains(t, s.Migrate(ctx), "permission denied", "creating the table needs CREATE on the schema")

	require.NoError(t, New(admin, WithSchema(schema)).Migrate(ctx))
	_, err = admin.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+s.name+" TO "+role)
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx), "Migrate on an existing table needs no CREATE")
	rec := mustClaim(t, s, "k", "fp", "t", time.Minute)
	require.NoError(t, s.Renew(ctx, "k", rec.Owner, time.Minute))
	require.NoError(t, s.Release(ctx, "k", rec.Owner))
	rec = mustClaim(t, s, "k", "fp", "t", time.Minute)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 201}, time.Microsecond))
	assert.Equal(t, 1, mustDeleteExpired(t, s, 10))
}
