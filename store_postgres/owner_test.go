package pgstore

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestStaleOwnerRefused: once a lapsed lease is taken over, the old
// owner's Renew, Complete and Release get store.ErrNotOwner, as does a
// lease with the new owner's token and the old fence; what the new owner
// completes is what a later claim reads.
func TestStaleOwnerRefused(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	old := mustClaim(t, s, "k", "fp", "old", time.Microsecond)
	cur := mustClaim(t, s, "k", "fp", "new", time.Minute)
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

// TestStaleOwnerUnderStricterIsolation: under repeatable read, a stale
// owner's Complete that waited for a transactional takeover's row lock
// gets store.ErrNotOwner once the takeover commits, not the server's
// serialization failure.
func TestStaleOwnerUnderStricterIsolation(t *testing.T) {
	t.Parallel()
	plain, inTx := isolatedStores(t, "repeatable read", 0)
	ctx := context.Background()

	stale := mustClaim(t, plain, "pay", "fp", "stale", 50*time.Millisecond)
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

// TestResponseRoundTripsBinary: the response Complete stores is the one a
// later Claim reads, byte for byte, under a key and a fingerprint that are
// not UTF-8 either.
func TestResponseRoundTripsBinary(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	cases := map[string]*store.Response{
		"binary": {
			Status: 201,
			Header: http.Header{
				"Content-Type": {"application/octet-stream"},
				"X-Raw":        {"\xff\xfe not utf-8 \x00 nul", "second \x80"},
				"Link":         {"</a>; rel=next", "</b>; rel=prev"},
			},
			Body: []byte{0, 1, 2, 0xff, 0xfe, '\n', 0},
		},
		"nil header and body":   {Status: 204},
		"empty header and body": {Status: 200, Header: http.Header{}, Body: []byte{}},
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			key := "key \x00\xff " + name
			fp := "fp \xff\x00"
			rec := mustClaim(t, s, key, fp, "tok\x00\xff", time.Minute)
			require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Hour))

			got, claimed, err := s.Claim(ctx, key, fp, "other", time.Minute)
			require.NoError(t, err, name)
			assert.False(t, claimed, name)
			assert.Equal(t, store.StateCompleted, got.State, name)
			assert.Equal(t, fp, got.Fingerprint, name)
			assert.Equal(t, resp, got.Response, name)
			assert.InDelta(t, time.Hour, got.TTL, float64(time.Minute), name)
		})
	}
}

func TestUnreplayableHasNoResponse(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	rec := mustClaim(t, s, "k", "fp", "a", time.Minute)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, nil, time.Hour))
	got, claimed, err := s.Claim(ctx, "k", "fp", "b", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateUnreplayable, got.State)
	assert.Nil(t, got.Response)
	assert.NoError(t, s.Complete(ctx, "k", rec.Owner, nil, time.Hour), "a Complete sent again by its owner")
	assert.ErrorIs(t, s.Release(ctx, "k", rec.Owner), store.ErrNotOwner, "a done key cannot be released")
}
