package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestMigrateSurvey: migrate counts the old store's live records and those
// the new store does not hold done, exiting 3 until the migrating store has
// copied every done one and the one in flight is done and copied too.
func TestMigrateSurvey(t *testing.T) {
	forEachTarget(t, func(t *testing.T, old target) {
		toFlags, to := sqliteTarget(t)
		newFlags := make([]string, len(toFlags))
		for i, f := range toFlags {
			newFlags[i] = f
			if i%2 == 0 { // a flag's name, not its value
				newFlags[i] = "-to-" + f[1:]
			}
		}
		survey := func(wantCode int) map[string]any {
			t.Helper()
			r := runCmd(old, append([]string{"migrate"}, newFlags...)...)
			require.Equal(t, wantCode, r.code, r.stderr)
			return r.json(t)
		}
		ctx := t.Context()
		pay(t, old.store, "acct_1", "done")
		inFlight := idempotency.StorageKey("acct_1", "POST", "/payments", "running")
		running, claimed, err := old.store.Claim(ctx, inFlight, "fp", rand.Text(), time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)

		out := survey(exitRemaining)
		require.EqualValues(t, 2, out["records"])
		require.Equal(t, map[string]any{"completed": 1.0, "in-flight": 1.0}, out["states"])
		require.EqualValues(t, 2, out["remaining"])
		require.InDelta(t, (24 * time.Hour).Milliseconds(), out["remaining_ttl_ms"], float64(time.Minute.Milliseconds()))

		m := store.Migrate(old.store.(store.Admin), to.(store.Admin))
		pay(t, m, "acct_1", "done") // a duplicate: replayed, and copied
		out = survey(exitRemaining)
		require.EqualValues(t, 1, out["remaining"], "the copied record is not remaining")
		require.InDelta(t, time.Minute.Milliseconds(), out["remaining_ttl_ms"], float64(10*time.Second.Milliseconds()))

		require.NoError(t, old.store.Complete(ctx, inFlight, running.Owner, nil, time.Hour))
		_, claimed, err = m.Claim(ctx, inFlight, "fp", rand.Text(), time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		out = survey(exitFound)
		require.EqualValues(t, 2, out["records"])
		require.Zero(t, out["remaining"])
	})
}

// TestEachHash: every live hash is visited once, however many more than
// one Find returns there are.
func TestEachHash(t *testing.T) {
	ctx := context.Background()
	m := store.NewMemory()
	for i := range 2*findBatch + 500 {
		_, _, err := m.Claim(ctx, fmt.Sprint("k", i), "fp", "token", time.Minute)
		require.NoError(t, err)
	}
	seen := map[string]int{}
	require.NoError(t, eachHash(ctx, m, "", func(hash string) error {
		seen[hash]++
		return nil
	}))
	require.Len(t, seen, 2*findBatch+500)
	for hash, n := range seen {
		require.Equal(t, 1, n, hash)
	}
}

// TestMigrateUsageErrors: a migrate command line without two stores, or
// with one store twice, exits 2 saying why.
func TestMigrateUsageErrors(t *testing.T) {
	from := []string{"-store", "sqlite", "-url", "/nonexistent/a.db"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no stores", nil, `-store "": want one of`},
		{"no new store", from, `-to-store "": want one of`},
		{"no new url", append([]string{"-to-store", "redis"}, from...), "-to-url is required"},
		{"same store", append([]string{"-to-store", "sqlite", "-to-url", "/nonexistent/a.db"}, from...), "name the -store itself"},
		{"bad table", append([]string{"-to-store", "mysql", "-to-url", "x", "-to-table", "A"}, from...), `-to-table "A"`},
		{"argument left", append([]string{"-to-store", "redis", "-to-url", "x", "extra"}, from...), `unexpected argument`},
		{"bad timeout", append([]string{"-to-store", "redis", "-to-url", "x", "-timeout", "0s"}, from...), "-timeout must be above 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			require.Equal(t, exitUsage, run(append([]string{"migrate"}, tc.args...), &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.Empty(t, stdout.String())
		})
	}
}
