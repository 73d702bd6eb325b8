package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecordIndexChainsKeysWithOneHash: keys whose hashes are equal (here
// every key's, with a hash that is a constant) are all found, and each
// removal, at the head, the middle or the end of their chain, leaves the
// others found and frees a slot that the next insert reuses.
func TestRecordIndexChainsKeysWithOneHash(t *testing.T) {
	x := newRecordIndex()
	x.hash = func(string) uint32 { return 7 }
	keys := []string{"a", "b", "c", "d", "e"}
	for i, key := range keys {
		x.insert(x.hash(key), inFlight(key, "fp", "token", int64(i+1), never))
	}
	requireFound := func(present ...string) {
		t.Helper()
		require.Equal(t, len(present), x.len())
		for _, key := range present {
			i := x.find(x.hash(key), key)
			require.GreaterOrEqual(t, i, int32(0), "%q is found", key)
			require.Equal(t, key, x.at(i).key())
		}
	}
	requireFound(keys...)
	require.Equal(t, int32(-1), x.find(7, "missing"))

	for _, removed := range []string{"e", "c", "a"} { // the head, the middle, the end of the chain
		i := x.find(7, removed)
		x.remove(i)
		require.Equal(t, int32(-1), x.find(7, removed), "%q is gone", removed)
		require.Zero(t, x.at(i).state, "a removed record's slot is free")
	}
	requireFound("b", "d")

	slots := x.slots
	x.insert(7, inFlight("f", "fp", "token", 6, never))
	require.Equal(t, slots, x.slots, "a free slot is reused")
	requireFound("b", "d", "f")
	x.remove(x.find(7, "b"))
	x.remove(x.find(7, "d"))
	x.remove(x.find(7, "f"))
	require.Empty(t, x.first, "no chain is left")
	require.Zero(t, x.len())
}

// TestRecordIndexGrowsByPages: records past the first pages are found, and
// growing leaves the records already held where they were.
func TestRecordIndexGrowsByPages(t *testing.T) {
	x := newRecordIndex()
	key := func(i int) string { return fmt.Sprint("key-", i) }
	x.insert(x.hash(key(0)), inFlight(key(0), "fp", "token", 1, never))
	first := x.at(0)
	for i := 1; i <= 2*slotsPerPage; i++ {
		x.insert(x.hash(key(i)), inFlight(key(i), "fp", "token", int64(i+1), never))
	}
	require.Len(t, x.pages, 3)
	require.Same(t, first, x.at(x.find(x.hash(key(0)), key(0))), "growing moved no record")
	for i := range 2*slotsPerPage + 1 {
		slot := x.find(x.hash(key(i)), key(i))
		require.GreaterOrEqual(t, slot, int32(0), "%q is found", key(i))
		require.Equal(t, int64(i+1), x.at(slot).fence)
	}
}

// TestMemorySurvivesHashCollisions runs the store's life cycle (claim,
// complete, replay, release, expiry and takeover, a sweep when full) on
// keys that all hash alike.
func TestMemorySurvivesHashCollisions(t *testing.T) {
	m := NewMemory(WithMaxRecords(8))
	m.records.hash = func(string) uint32 { return 1 }
	ctx := t.Context()
	owners := map[string]Lease{}
	for i := range 6 {
		key := fmt.Sprint("k", i)
		rec, claimed, err := m.Claim(ctx, key, "fp-"+key, "t-"+key, never)
		require.NoError(t, err)
		require.True(t, claimed)
		owners[key] = rec.Owner
	}
	for i := range 3 {
		key := fmt.Sprint("k", i)
		require.NoError(t, m.Complete(ctx, key, owners[key], &Response{Status: 200 + i, Body: []byte(key)}, never))
	}
	require.NoError(t, m.Release(ctx, "k3", owners["k3"]))
	for i := range 6 {
		key := fmt.Sprint("k", i)
		rec, claimed, err := m.Claim(ctx, key, "fp-"+key, "other", never)
		require.NoError(t, err)
		switch {
		case i < 3:
			require.False(t, claimed)
			require.Equal(t, "fp-"+key, rec.Fingerprint)
			require.Equal(t, key, string(rec.Response.Body), "the record of %q", key)
		case i == 3:
			require.True(t, claimed, "the released key is claimed again")
		default:
			require.False(t, claimed)
			require.Equal(t, StateInFlight, rec.State)
		}
	}
	require.Equal(t, 6, MemoryLen(m))

	for _, key := range []string{"k6", "k7"} { // the store's last two records, soon expired
		_, claimed, err := m.Claim(ctx, key, "fp", "t", 20*time.Millisecond)
		require.NoError(t, err)
		require.True(t, claimed)
	}
	time.Sleep(50 * time.Millisecond)
	rec, claimed, err := m.Claim(ctx, "k7", "fp", "takeover", never)
	require.NoError(t, err)
	require.True(t, claimed, "an expired record is taken over")
	require.Equal(t, "takeover", rec.Owner.Token)
	_, claimed, err = m.Claim(ctx, "k8", "fp", "t", never) // the store is full: a sweep drops k6
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 8, MemoryLen(m))
	for i := range 3 {
		key := fmt.Sprint("k", i)
		rec, _, err := m.Claim(ctx, key, "fp-"+key, "other", never)
		require.NoError(t, err)
		require.Equal(t, key, string(rec.Response.Body), "the record of %q, after the sweep", key)
	}
}
