package pgstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	for range 3 {
		s := New(p, WithTable(testTable(t)))
		t.Cleanup(func() { dropTable(t, s) })
		const workers = 12
		errs := make([]error, workers)
		ready := make(chan struct{})
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				<-ready
				errs[i] = s.Migrate(ctx)
			})
		}
		close(ready)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		_, claimed, err := s.Claim(ctx, "k", "fp", "t", time.Minute)
		require.NoError(t, err)
		assert.True(t, claimed)
		require.NoError(t, s.Migrate(ctx), "Migrate on an existing table changes nothing")
	}
}

func TestMigrateInSchema(t *testing.T) {
	t.Parallel()
	p := testPool(t)
	ctx := context.Background()
	schema := testTable(t)
	_, err := p.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
	})
	s := New(p, WithSchema(schema))
	require.NoError(t, s.Migrate(ctx))
	var n int
	require.NoError(t, p.QueryRow(ctx,
		`SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, schema, DefaultTable).Scan(&n))
	assert.Equal(t, 2, n, "primary key and expiry index, both in the schema")
	_, claimed, err := s.Claim(ctx, "k", "fp", "t", time.Minute)
	require.NoError(t, err)
	assert.True(t, claimed)
}

func TestNamesAreValidatedAndQuoted(t *testing.T) {
	for _, bad := range []string{"", "Keys", "1keys", "keys; DROP TABLE x", `ke"ys`, "k-eys", strings.Repeat("k", 51)} {
		want := fmt.Sprintf("pgstore: WithTable expects a name matching ^[a-z_][a-z0-9_]{0,49}$, got %q", bad)
		assert.PanicsWithValue(t, want, func() { WithTable(bad) }, bad)
		if len(bad) <= 50 {
			assert.Panics(t, func() { WithSchema(bad) }, bad)
		}
	}
	assert.NotPanics(t, func() { WithTable(strings.Repeat("k", 50)) })
	assert.NotPanics(t, func() { WithSchema(strings.Repeat("s", 63)) })
	assert.PanicsWithValue(t, "pgstore: New expects a non-nil pool", func() { New(nil) })
}

func TestStatementsUseQuotedNames(t *testing.T) {
	st := newStatements(`"s"."t"`, `"t_expires_idx"`)
	for _, sql := range []string{st.schema, st.claim, st.renew, st.complete, st.release, st.deleteExpired} {
		assert.NotContains(t, sql, DefaultTable)
		assert.Contains(t, sql, `"s"."t"`)
	}
	assert.Contains(t, st.schema, `INDEX IF NOT EXISTS "t_expires_idx" ON "s"."t" (expires_at)`)
}
