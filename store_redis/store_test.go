package redisstore_test

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestAwkwardKeys: keys that hold braces, percent signs or zero bytes, are
// empty, or are long work on a Cluster (each script's two keys stay in one
// slot) and never collide with one another.
func TestAwkwardKeys(t *testing.T) {
	keys := []string{"", "{", "}", "}{", "{}", "{a}b", "a{b}", "%", "%7B", "%257B", "%%", "plain",
		"\x00", "\x00\x04POST", strings.Repeat("k", 4096)}
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, _ := newStore(t, client)
		ctx := t.Context()
		for _, key := range keys {
			rec, claimed, err := s.Claim(ctx, key, "fp "+key, "token "+key, time.Minute)
			require.NoError(t, err, "Claim(%q)", key)
			require.True(t, claimed, "Claim(%q) must win: no other key may share its record", key)
			resp := &store.Response{Status: http.StatusCreated, Body: []byte("body " + key)}
			require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Minute), "Complete(%q)", key)
		}
		for _, key := range keys {
			rec, claimed, err := s.Claim(ctx, key, "other", "another token", time.Minute)
			require.NoError(t, err, "Claim(%q)", key)
			require.False(t, claimed, "Claim(%q) again", key)
			assert.Equal(t, "fp "+key, rec.Fingerprint, "key %q", key)
			require.NotNil(t, rec.Response, "key %q", key)
			assert.Equal(t, "body "+key, string(rec.Response.Body), "key %q", key)
		}
	})
}

// TestEveryKeyExpires: every key the store writes, in flight, done or
// released, carries an expiry, and the in-flight record outlives its lease
// by the abandoned retention, a released one included.
func TestEveryKeyExpires(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client, redisstore.WithAbandonedRetention(time.Hour))
		ctx := t.Context()
		rec, _, err := s.Claim(ctx, "running", "fp", "token", time.Minute)
		require.NoError(t, err)
		done, _, err := s.Claim(ctx, "done", "fp", "token", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, "done", done.Owner, nil, 2*time.Hour))

		ttls := keyTTLs(t, client, prefix)
		require.Len(t, ttls, 3, "an in-flight record and its lease, and a done record: %v", ttls)
		lease := ttls[recordKey(prefix, "running")+":lease"]
		assert.Positive(t, lease)
		assert.LessOrEqual(t, lease, time.Minute)
		inFlight := ttls[recordKey(prefix, "running")]
		assert.Greater(t, inFlight, time.Hour, "an in-flight record outlives its lease")
		assert.LessOrEqual(t, inFlight, time.Hour+time.Minute)
		assert.Greater(t, ttls[recordKey(prefix, "done")], time.Hour, "a done record is kept for its retention")
		assert.LessOrEqual(t, ttls[recordKey(prefix, "done")], 2*time.Hour)

		require.NoError(t, s.Release(ctx, "running", rec.Owner))
		ttls = keyTTLs(t, client, prefix)
		assert.Len(t, ttls, 2, "Release deletes the lease and keeps the record: %v", ttls)
		assert.Greater(t, ttls[recordKey(prefix, "running")], time.Hour, "a released record keeps its expiry")
	})
}

// keyTTLs returns the time left on every key under prefix.
func keyTTLs(t *testing.T, client redis.UniversalClient, prefix string) map[string]time.Duration {
	t.Helper()
	ttls := make(chan map[string]time.Duration, 16)
	require.NoError(t, forEachNode(t.Context(), client, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+"*").Result()
		m := make(map[string]time.Duration)
		for _, key := range keys {
			m[key] = node.PTTL(ctx, key).Val()
		}
		ttls <- m
		return err
	}))
	close(ttls)
	all := make(map[string]time.Duration)
	for m := range ttls {
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// TestStaleCompleteChangesNothing: after a takeover, the stale owner's
// Complete is refused, and the record and lease the new owner holds are,
// field for field, what they were before it.
func TestStaleCompleteChangesNothing(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client)
		ctx := t.Context()
		stale, claimed, err := s.Claim(ctx, "pay", "fp-stale", "stale", 100*time.Millisecond)
		require.NoError(t, err)
		require.True(t, claimed)
		time.Sleep(300 * time.Millisecond)
		current, claimed, err := s.Claim(ctx, "pay", "fp-current", "current", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed, "the lapsed lease is taken over")
		require.Equal(t, stale.Owner.Fence+1, current.Owner.Fence)

		record := recordKey(prefix, "pay")
		lease := record + ":lease"
		before := client.HGetAll(ctx, record).Val()
		require.Equal(t, map[string]string{"state": "1", "fp": "fp-current", "token": "current", "fence": "2"}, before)
		require.Equal(t, "current", client.Get(ctx, lease).Val())

		resp := &store.Response{Status: http.StatusCreated, Body: []byte("stale")}
		require.ErrorIs(t, s.Complete(ctx, "pay", stale.Owner, resp, time.Hour), store.ErrNotOwner)
		require.ErrorIs(t, s.Complete(ctx, "pay", stale.Owner, nil, time.Hour), store.ErrNotOwner)

		assert.Equal(t, before, client.HGetAll(ctx, record).Val(), "the record is untouched")
		assert.Equal(t, "current", client.Get(ctx, lease).Val(), "the lease is untouched")
		assert.Greater(t, client.PTTL(ctx, lease).Val(), 30*time.Second, "the lease is not shortened")
	})
}

// TestFenceGrowsAcrossTakeovers: each takeover of a lapsed lease gets the
// next fencing number, and once the abandoned retention is over too the
// key is forgotten and starts again at 1.
func TestFenceGrowsAcrossTakeovers(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		const lease = 50 * time.Millisecond
		s, _ := newStore(t, client, redisstore.WithAbandonedRetention(2*time.Second))
		ctx := t.Context()
		for want := int64(1); want <= 3; want++ {
			rec, claimed, err := s.Claim(ctx, "crashy", "fp", "token", lease)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Equal(t, want, rec.Owner.Fence, "takeover %d", want)
			time.Sleep(4 * lease)
		}
		time.Sleep(2500 * time.Millisecond)
		rec, claimed, err := s.Claim(ctx, "crashy", "fp", "token", lease)
		require.NoError(t, err)
		require.True(t, claimed)
		assert.Equal(t, int64(1), rec.Owner.Fence, "an abandoned record is forgotten after its retention")
	})
}

// TestUnreachableServer: when Redis cannot be reached, every method
// returns an error that wraps the driver's, prefixed with the package
// name, and never store.ErrNotOwner.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := redisstore.New(client)
	ctx := t.Context()
	owner := store.Lease{Token: "token", Fence: 1}

	_, _, claimErr := s.Claim(ctx, "key", "fp", "token", time.Minute)
	for op, err := range map[string]error{
		"Claim":    claimErr,
		"Renew":    s.Renew(ctx, "key", owner, time.Minute),
		"Complete": s.Complete(ctx, "key", owner, nil, time.Hour),
		"Release":  s.Release(ctx, "key", owner),
	} {
		var opErr *net.OpError
		require.ErrorAs(t, err, &opErr, "%s wraps the dial error", op)
		assert.NotErrorIs(t, err, store.ErrNotOwner, op)
		assert.Regexp(t, `^redisstore: \w+: `, err.Error(), op)
	}
}

// TestMisconfigurationPanics: New and the options panic, naming the
// package, on values that cannot work.
func TestMisconfigurationPanics(t *testing.T) {
	client := redis.NewClient(&redis.Options{})
	t.Cleanup(func() { _ = client.Close() })
	assert.PanicsWithValue(t, "redisstore: New expects a non-nil client", func() { redisstore.New(nil) })
	assert.PanicsWithValue(t, "redisstore: WithPrefix expects a prefix without '{' or '}'", func() {
		redisstore.New(client, redisstore.WithPrefix("app{1}:"))
	})
	assert.PanicsWithValue(t, "redisstore: WithAbandonedRetention expects d > 0", func() {
		redisstore.New(client, redisstore.WithAbandonedRetention(0))
	})
}

// TestCorruptRecord: a record the store did not write (a stray HSET, a
// half-restored backup) makes Claim return an error, never panic or invent
// a response.
func TestCorruptRecord(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client)
		ctx := t.Context()
		for key, fields := range map[string][]any{
			"bad-status": {"state", "2", "fp", "fp", "fence", "1", "status", "abc", "header", "", "body", ""},
			"bad-header": {"state", "2", "fp", "fp", "fence", "1", "status", "201", "header", "\x05", "body", ""},
			"no-fence":   {"state", "1", "fp", "fp", "token", "t"},
		} {
			require.NoError(t, client.HSet(ctx, recordKey(prefix, key), fields...).Err())
			rec, claimed, err := s.Claim(ctx, key, "fp", "token", time.Minute)
			require.Error(t, err, key)
			assert.Regexp(t, `^redisstore: claim: `, err.Error(), key)
			assert.False(t, claimed, key)
			assert.Equal(t, store.Record{}, rec, key)
		}
	})
}

// TestLongestAbandonedRetention: an abandoned retention as long as a
// time.Duration goes does not overflow into a record that expires at once
// while its lease still runs, which would let a second claim win.
func TestLongestAbandonedRetention(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, _ := newStore(t, client, redisstore.WithAbandonedRetention(math.MaxInt64))
		ctx := t.Context()
		first, claimed, err := s.Claim(ctx, "pay", "fp", "first", 30*time.Second)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, s.Renew(ctx, "pay", first.Owner, 30*time.Second))
		time.Sleep(20 * time.Millisecond)
		_, claimed, err = s.Claim(ctx, "pay", "fp", "second", 30*time.Second)
		require.NoError(t, err)
		require.False(t, claimed, "a second claim won while the first one's lease runs")
	})
}
