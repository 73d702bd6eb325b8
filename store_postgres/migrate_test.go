package pgstore

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
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
		race(workers, func(i int) { errs[i] = spellings[i%2].Migrate(ctx) })
		for _, err := range errs {
			require.NoError(t, err)
		}
		mustClaim(t, s, "k", "fp", "t", time.Minute)
		require.NoError(t, s.Migrate(ctx), "Migrate on an existing table changes nothing")
	}
}

// TestMigrateUpgrades: a table made by the schema before key_is_sha256,
// holding a completed record, one in flight and many more, is upgraded by
// 12 workers calling Migrate at once. Every record is still there and
// found by its key, with its response, owner and fence; the expiry index is
// gone, and a key in the old hex form is refused.
func TestMigrateUpgrades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testPool(t), WithTable(testTable(t)))
	t.Cleanup(func() { dropTable(t, s) })
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, strings.NewReplacer(DefaultTable+"_expires_idx", s.table+"_expires_idx", DefaultTable, s.name).Replace(string(v1)))
	require.NoError(t, err)
	const others = 500
	_, err = s.pool.Exec(ctx, `
INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, status, header, body, expires_at)
VALUES (convert_to($1, 'UTF8'), 'fp', 2, 'a', 1, 201, '{"Location","/p/1"}', 'paid', now() + interval '1 hour'),
       (convert_to($2, 'UTF8'), 'fp', 1, 'b', 3, NULL, NULL, NULL, now() + interval '1 minute')`,
		store.HashKey("done"), store.HashKey("busy"))
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `
INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, status, expires_at)
SELECT convert_to(encode(sha256(int4send(i)), 'hex'), 'UTF8'), 'fp', 3, 'c', 1, NULL, now() + interval '1 hour'
FROM generate_series(1, $1::int) AS i`, others)
	require.NoError(t, err)

	// Before the upgrade this version claims nothing on the table: its keys
	// are spelled otherwise, so it would miss the records held there.
	tx := NewTx(s.pool, WithTable(s.table))
	for _, claim := range []func() error{
		func() error { _, _, err := s.Claim(ctx, "busy", "fp", "x", time.Minute); return err },
		func() error { _, _, _, err := tx.BeginClaim(ctx, "busy", "fp", "x"); return err },
	} {
		require.ErrorContains(t, claim(), "run Migrate")
	}

	errs := make([]error, 12)
	race(len(errs), func(i int) { errs[i] = s.Migrate(ctx) })
	for _, err := range errs {
		require.NoError(t, err)
	}

	rec, claimed, err := s.Claim(ctx, "done", "fp", "x", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, &store.Response{Status: 201, Header: http.Header{"Location": {"/p/1"}}, Body: []byte("paid")}, rec.Response)
	rec, claimed, err = s.Claim(ctx, "busy", "fp", "x", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateInFlight, rec.State)
	assert.Equal(t, int64(3), rec.Owner.Fence)
	require.NoError(t, s.Complete(ctx, "busy", store.Lease{Token: "b", Fence: 3}, nil, time.Hour), "the owner still owns it")
	assert.Equal(t, others+2, count(t, s), "no row lost")

	var indexes int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, s.table).Scan(&indexes))
	assert.Equal(t, 1, indexes, "the primary key alone")
	_, err = s.pool.Exec(ctx, `INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, expires_at)
VALUES (convert_to($1, 'UTF8'), 'fp', 1, 'd', 1, now())`, store.HashKey("old"))
	assert.ErrorContains(t, err, "key_is_sha256", "an earlier version's key is refused")
	require.NoError(t, s.Migrate(ctx), "Migrate on an upgraded table changes nothing")
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
