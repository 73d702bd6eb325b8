package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
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
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			token := fmt.Sprintf("token-%d", i)
			<-ready
			rec, claimed, err := s.Claim(context.Background(), key, fp(i), token, time.Minute)
			results[i] = claimResult{token: token, rec: rec, claimed: claimed, err: err}
		})
	}
	close(ready)
	wg.Wait()
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

func TestClaimRaceOnFreshKey(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	for round := range 20 {
		key := fmt.Sprintf("fresh-%d", round)
		results := raceClaims(s, key, 16, func(i int) string { return fmt.Sprintf("fp-%d", i) })
		w := winner(t, results)
		assert.Equal(t, int64(1), w.rec.Owner.Fence)
		for _, r := range results {
			if r.claimed {
				continue
			}
			assert.Equal(t, store.StateInFlight, r.rec.State)
			assert.Equal(t, w.rec.Fingerprint, r.rec.Fingerprint, "a loser sees the winner's record")
			assert.Empty(t, r.rec.Owner.Token)
			assert.Positive(t, r.rec.TTL)
		}
	}
}

func TestClaimRaceOnExpiredLease(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("expired-%d", round)
		first, claimed, err := s.Claim(ctx, key, "old", "old-owner", time.Microsecond)
		require.NoError(t, err)
		require.True(t, claimed)

		results := raceClaims(s, key, 16, func(i int) string { return fmt.Sprintf("fp-%d", i) })
		w := winner(t, results)
		assert.Equal(t, first.Owner.Fence+1, w.rec.Owner.Fence, "a takeover raises the fence")
		for _, r := range results {
			if r.claimed {
				continue
			}
			assert.Equal(t, store.StateInFlight, r.rec.State)
			assert.Equal(t, w.rec.Fingerprint, r.rec.Fingerprint, "a loser sees the new owner's record, not the expired one")
			assert.Positive(t, r.rec.TTL)
		}
		assert.ErrorIs(t, s.Complete(ctx, key, first.Owner, nil, time.Hour), store.ErrNotOwner)
		require.NoError(t, s.Complete(ctx, key, w.rec.Owner, nil, time.Hour))
	}
}

func TestStaleOwnerRefused(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	old, _, err := s.Claim(ctx, "k", "fp", "old", time.Microsecond)
	require.NoError(t, err)
	cur, claimed, err := s.Claim(ctx, "k", "fp", "new", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, old.Owner.Fence+1, cur.Owner.Fence)

	assert.ErrorIs(t, s.Renew(ctx, "k", old.Owner, time.Hour), store.ErrNotOwner)
	assert.ErrorIs(t, s.Complete(ctx, "k", old.Owner, &store.Response{Status: 500}, time.Hour), store.ErrNotOwner)
	assert.ErrorIs(t, s.Release(ctx, "k", old.Owner), store.ErrNotOwner)
	sameTokenOldFence := store.Lease{Token: "new", Fence: old.Owner.Fence}
	assert.ErrorIs(t, s.Complete(ctx, "k", sameTokenOldFence, nil, time.Hour), store.ErrNotOwner)

	resp := &store.Response{Status: 201, Body: []byte("new owner")}
	require.NoError(t, s.Complete(ctx, "k", cur.Owner, resp, time.Hour))
	rec, claimed, err := s.Claim(ctx, "k", "fp", "third", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, resp, rec.Response)
}

func TestClaimAfterRetentionStartsAgain(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	rec, _, err := s.Claim(ctx, "k", "fp", "a", time.Microsecond)
	require.NoError(t, err)
	rec, _, err = s.Claim(ctx, "k", "fp", "b", time.Minute)
	require.NoError(t, err)
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
	rec, _, err := s.Claim(ctx, "k", "fp", "a", time.Microsecond)
	require.NoError(t, err)
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
			table, pool := isolatedPool(t, level, 16)
			plain := New(pool, WithTable(table))
			inTx := NewTx(pool, WithTable(table))
			for round := range 10 {
				key := fmt.Sprint("race-", round)
				var wg sync.WaitGroup
				var mu sync.Mutex
				won := 0
				var errs []error
				for i := range 16 {
					wg.Go(func() {
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
				}
				wg.Wait()
				require.Empty(t, errs, "round %d", round)
				require.Equal(t, 1, won, "round %d: exactly one claim wins", round)
			}
		})
	}
}

// TestStaleOwnerUnderStricterIsolation: under repeatable read, a stale
// owner's Complete that waited for a transactional takeover's row lock
// gets store.ErrNotOwner once the takeover commits, not the server's
// serialization failure.
func TestStaleOwnerUnderStricterIsolation(t *testing.T) {
	t.Parallel()
	table, pool := isolatedPool(t, "repeatable read", 0)
	plain := New(pool, WithTable(table))
	inTx := NewTx(pool, WithTable(table))
	ctx := context.Background()

	stale, claimed, err := plain.Claim(ctx, "pay", "fp", "stale", 50*time.Millisecond)
	require.NoError(t, err)
	require.True(t, claimed)
	time.Sleep(100 * time.Millisecond)
	_, _, tx, err := inTx.BeginClaim(ctx, "pay", "fp", "takeover")
	require.NoError(t, err)
	require.NotNil(t, tx, "the transactional claim takes the lapsed row over")

	completed := make(chan error, 1)
	go func() { completed <- plain.Complete(ctx, "pay", stale.Owner, nil, time.Hour) }()
	time.Sleep(200 * time.Millisecond) // the Complete is waiting on the row lock
	require.NoError(t, tx.Commit(ctx, nil, time.Hour))
	require.ErrorIs(t, <-completed, store.ErrNotOwner)
}
