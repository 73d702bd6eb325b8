package mysqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestInspect: a live record is found as a claim would read it, without
// its token; an expired one, a held one's lapse and a missing one are not.
func TestInspect(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	live := mustClaim(t, s, "live", "fp", longLease)
	resp := &store.Response{Status: 201, Header: map[string][]string{"Location": {"/p/1"}}, Body: []byte("paid")}
	done := mustClaim(t, s, "done", "fp-done", longLease)
	require.NoError(t, s.Complete(ctx, "done", done.Owner, resp, longLease))
	mustClaim(t, s, "lapsed", "fp", time.Millisecond)
	time.Sleep(5 * time.Millisecond)

	rec, found, err := s.Inspect(ctx, store.HashKey("live"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, store.StateInFlight, rec.State)
	require.Equal(t, store.Lease{Fence: live.Owner.Fence}, rec.Owner)
	require.InDelta(t, longLease, rec.TTL, float64(5*time.Second))

	rec, found, err = s.Inspect(ctx, store.HashKey("done"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "fp-done", rec.Fingerprint)
	require.Equal(t, resp, rec.Response)

	for _, key := range []string{"lapsed", "missing"} {
		_, found, err = s.Inspect(ctx, store.HashKey(key))
		require.NoError(t, err)
		require.False(t, found, key)
	}
	_, _, err = s.Inspect(ctx, "ABC")
	require.ErrorIs(t, err, store.ErrBadHash)
}

// TestDelete: a done record is deleted; a live lease only when forced; a
// missing or expired record reports none.
func TestDelete(t *testing.T) {
	s := newTestStore(t)
	tx := &TxStore{Store: s}
	ctx := context.Background()
	done := mustClaim(t, s, "done", "fp", longLease)
	require.NoError(t, s.Complete(ctx, "done", done.Owner, nil, longLease))
	mustClaim(t, s, "live", "fp", longLease)
	mustClaim(t, s, "lapsed", "fp", time.Millisecond)
	_, _, held, err := tx.BeginClaim(ctx, "held", "fp", newToken())
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	time.Sleep(5 * time.Millisecond)

	for _, tc := range []struct {
		key     string
		force   bool
		deleted bool
		err     error
	}{
		{"done", false, true, nil},
		{"done", false, false, nil},
		{"live", false, false, store.ErrLeaseLive},
		{"held", false, false, store.ErrLeaseLive},
		{"live", true, true, nil},
		{"lapsed", false, false, nil},
		{"missing", true, false, nil},
	} {
		deleted, err := s.Delete(ctx, store.HashKey(tc.key), tc.force)
		require.ErrorIs(t, err, tc.err, "%+v", tc)
		require.Equal(t, tc.deleted, deleted, "%+v", tc)
	}
	mustClaim(t, s, "live", "fp", longLease)
	mustClaim(t, s, "lapsed", "fp", longLease)
}

// TestFind: the live records whose hash begins with a prefix, at most
// limit of them.
func TestFind(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d"}
	for _, key := range keys {
		mustClaim(t, s, key, "fp", longLease)
	}
	mustClaim(t, s, "lapsed", "fp", time.Millisecond)
	time.Sleep(5 * time.Millisecond)

	all, err := s.Find(ctx, "", 10)
	require.NoError(t, err)
	want := make([]string, len(keys))
	for i, key := range keys {
		want[i] = store.HashKey(key)
	}
	require.ElementsMatch(t, want, all)

	hash := store.HashKey("c")
	for _, prefix := range []string{hash[:1], hash[:7], hash} {
		found, err := s.Find(ctx, prefix, 10)
		require.NoError(t, err)
		require.Contains(t, found, hash, prefix)
		for _, h := range found {
			require.Equal(t, prefix, h[:len(prefix)])
		}
	}
	two, err := s.Find(ctx, "", 2)
	require.NoError(t, err)
	require.Len(t, two, 2)
	_, err = s.Find(ctx, "ABC", 2)
	require.ErrorContains(t, err, "lower-case hex")
}

// TestPing: a reachable server answers; a closed pool does not.
func TestPing(t *testing.T) {
	db := testDB(t)
	s := New(db)
	require.NoError(t, s.Ping(context.Background()))
	require.NoError(t, db.Close())
	require.ErrorContains(t, s.Ping(context.Background()), "mysqlstore: ping")
}
