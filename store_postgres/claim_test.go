package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// claimResult is what one racing Claim saw.
type claimResult struct {
	token   string
	rec     store.Record
	claimed bool
	err     error
}

// raceClaims runs n claims of key at once, each under its own token and
// with fingerprint fp(i), and returns what each saw.
func raceClaims(s *Store, key string, n int, fp func(i int) string) []claimResult {
	results := make([]claimResult, n)
	storetest.Together(n, func(i int) {
		token := fmt.Sprintf("token-%d", i)
		rec, claimed, err := s.Claim(context.Background(), key, fp(i), token, time.Minute)
		results[i] = claimResult{token: token, rec: rec, claimed: claimed, err: err}
	})
	return results
}

// winner checks that exactly one result claimed the key and returns it.
func winner(t *testing.T, results []claimResult) claimResult {
	t.Helper()
	var won []claimResult
	for _, r := range results {
		require.NoError(t, r.err)
		if r.claimed {
			won = append(won, r)
		}
	}
	require.Len(t, won, 1, "exactly one racing claim must win")
	return won[0]
}

// TestClaimRace: 16 claims of one key race, round after round, on a fresh
// key and on a key whose lease has expired. Exactly one wins, with the
// next fencing number; every loser sees the winner's record (not the
// expired one) without its token; only the winner may complete.
func TestClaimRace(t *testing.T) {
	for _, c := range []struct {
		name    string
		expired bool
	}{{"fresh key", false}, {"expired lease", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t)
			ctx := context.Background()
			for round := range 20 {
				key := fmt.Sprintf("%s-%d", c.name, round)
				var first store.Record
				if c.expired {
					first = mustClaim(t, s, key, "old", "old-owner", time.Microsecond)
				}

				results := raceClaims(s, key, 16, func(i int) string { return fmt.Sprintf("fp-%d", i) })
				w := winner(t, results)
				assert.Equal(t, first.Owner.Fence+1, w.rec.Owner.Fence, "a claim takes the next fence")
				for _, r := range results {
					if r.claimed {
						continue
					}
					assert.Equal(t, store.StateInFlight, r.rec.State)
					assert.Equal(t, w.rec.Fingerprint, r.rec.Fingerprint, "a loser sees the winner's record, not an expired one")
					assert.Empty(t, r.rec.Owner.Token)
					assert.Positive(t, r.rec.TTL)
				}
				if c.expired {
					assert.ErrorIs(t, s.Complete(ctx, key, first.Owner, nil, time.Hour), store.ErrNotOwner)
				}
				require.NoError(t, s.Complete(ctx, key, w.rec.Owner, nil, time.Hour))
			}
		})
	}
}

func TestClaimAfterRetentionStartsAgain(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	mustClaim(t, s, "k", "fp", "a", time.Microsecond)
	rec := mustClaim(t, s, "k", "fp", "b", time.Minute)
	require.Equal(t, int64(2), rec.Owner.Fence)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 200}, time.Microsecond))

	rec, claimed, err := s.Claim(ctx, "k", "other", "c", time.Minute)
	require.NoError(t, err)
	assert.True(t, claimed, "a record past its retention counts as absent")
	assert.Equal(t, store.Record{
		State: store.StateInFlight, Fingerprint: "other",
		Owner: store.Lease{Token: "c", Fence: 1}, TTL: time.Minute,
	}, rec)
}

func TestLapsedLeaseStillOwnedUntilTakenOver(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	rec := mustClaim(t, s, "k", "fp", "a", time.Microsecond)
	require.NoError(t, s.Renew(ctx, "k", rec.Owner, time.Minute))
	again, claimed, err := s.Claim(ctx, "k", "fp", "b", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed, "a renewed lease is not taken over")
	assert.Equal(t, store.StateInFlight, again.State)
}

// TestClaimRaceUnderStricterIsolation: with repeatable read or serializable
// as the connections' default isolation level, the losers of a race for one
// key get a serialization failure from the server; the store runs their
// statement again and reports the key taken, never an error (which the
// middleware would answer with 503). Plain claims and transactional ones
// race together.
func TestClaimRaceUnderStricterIsolation(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			plain, inTx := isolatedStores(t, level, 16)
			for round := range 10 {
				key := fmt.Sprint("race-", round)
				var mu sync.Mutex
				won := 0
				var errs []error
				storetest.Together(16, func(i int) {
					token := fmt.Sprint("token-", i)
					var claimed bool
					var err error
					if i%2 == 0 {
						_, claimed, err = plain.Claim(context.Background(), key, "fp", token, time.Minute)
					} else {
						var tx store.Tx
						_, _, tx, err = inTx.BeginClaim(context.Background(), key, "fp", token)
						if tx != nil {
							claimed = true
							err = tx.Commit(context.Background(), nil, time.Hour)
						}
					}
					mu.Lock()
					defer mu.Unlock()
					if claimed {
						won++
					}
					if err != nil {
						errs = append(errs, err)
					}
				})
				require.Empty(t, errs, "round %d", round)
				require.Equal(t, 1, won, "round %d: exactly one claim wins", round)
			}
		})
	}
}

// TestTableNamedAfterAStatementsPart: a table may take the name of a part
// of the store's statements (their WITH queries), unqualified, on the
// search path: every operation still reads and writes the table.
func TestTableNamedAfterAStatementsPart(t *testing.T) {
	t.Parallel()
	schema := testSchema(t, testPool(t))
	p := ownPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["search_path"] = schema })
	ctx := context.Background()
	for _, name := range []string{"guard", "inserted", "taken", "again", "done", "expired"} {
		t.Run(name, func(t *testing.T) {
			s := New(p, WithTable(name))
			require.NoError(t, s.Migrate(ctx))
			owner := mustClaim(t, s, "k", "fp", "t1", time.Minute).Owner
			require.NoError(t, s.Renew(ctx, "k", owner, time.Minute))
			require.NoError(t, s.Complete(ctx, "k", owner, &store.Response{Status: 201, Body: []byte("ok")}, time.Minute))
			rec, claimed, err := s.Claim(ctx, "k", "fp", "t2", time.Minute)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Equal(t, []byte("ok"), rec.Response.Body)
			released := mustClaim(t, s, "r", "fp", "t3", time.Minute).Owner
			require.NoError(t, s.Release(ctx, "r", released))
			_, err = s.DeleteExpired(ctx, 10)
			require.NoError(t, err)
		})
	}
}
