package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	"github.com/seed43327c4c/idempotency/store/storetest/waitbench"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// wokenWithin is how long a watch may take to be woken: far more than it
// takes, so only a wake-up that never comes reaches it.
const wokenWithin = 5 * time.Second

// TestWatchConformance runs the shared suite of store.Watcher against
// standalone Redis, a Redis Cluster and a Sentinel's master.
func TestWatchConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		storetest.RunWatch(t, func(t *testing.T) store.Watcher {
			s, _ := newStore(t, client)
			return s
		})
	})
}

// TestWatchPublishes: on a server of the test's own, so that INFO
// commandstats counts the store's commands only, a first request that
// nobody waits for still costs 5 commands and publishes nothing, and the
// complete or release of a key that one or several watchers wait for
// publishes exactly once and wakes them all.
func TestWatchPublishes(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	require.NoError(t, redisstore.LoadScripts(t.Context(), client))
	s, _ := newStore(t, client)
	claim(t, s, "warm-up") // a connection's first pipeline sends HELLO again
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		watchers int
		end      func(key string, owner store.Lease) error
	}{
		{"complete, no watcher", 0, func(key string, owner store.Lease) error {
			return s.Complete(ctx, key, owner, &store.Response{Status: 201}, time.Minute)
		}},
		{"complete, one watcher", 1, func(key string, owner store.Lease) error {
			return s.Complete(ctx, key, owner, &store.Response{Status: 201}, time.Minute)
		}},
		{"complete, eight watchers", 8, func(key string, owner store.Lease) error {
			return s.Complete(ctx, key, owner, nil, time.Minute)
		}},
		{"release, one watcher", 1, func(key string, owner store.Lease) error {
			return s.Release(ctx, key, owner)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, published := serverWorkOf(t, client), commandWorkOf(t, client)["spublish"].calls
			rec, claimed, err := s.Claim(ctx, tc.name, "fp", "owner", time.Minute)
			require.NoError(t, err)
			require.True(t, claimed)
			watchers := make([]<-chan struct{}, tc.watchers)
			for i := range watchers {
				changed, stop, err := s.Watch(ctx, tc.name)
				require.NoError(t, err)
				t.Cleanup(stop)
				watchers[i] = changed
			}
			require.NoError(t, tc.end(tc.name, rec.Owner))
			for i, changed := range watchers {
				requireClosed(t, changed, "watcher "+strconv.Itoa(i))
			}
			published = commandWorkOf(t, client)["spublish"].calls - published
			if tc.watchers == 0 {
				assert.Equal(t, int64(5), serverWorkOf(t, client).since(before).calls, "commands of a first request nobody waits for")
				assert.Zero(t, published, "publications")
				return
			}
			assert.Equal(t, int64(1), published, "publications")
		})
	}
}

// TestWatchNeedsShardedPubSub: on a Ring, whose shards the store cannot
// tell apart, Watch returns an error (its caller polls), and the store
// works on.
func TestWatchNeedsShardedPubSub(t *testing.T) {
	server := startRedis(t, freePort(t), "")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": server.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	s := redisstore.New(ring) // on a server of the test's own, gone when it ends
	claim(t, s, "pay")
	_, stop, err := s.Watch(t.Context(), "pay")
	require.ErrorContains(t, err, "sharded pub/sub needs")
	assert.Nil(t, stop)
	claim(t, s, "another")
}

// BenchmarkWaitWake measures, through the middleware, how soon a request
// waiting with WithWait is answered after its duplicate completes, on
// REDIS_URL (see store/storetest/waitbench).
func BenchmarkWaitWake(b *testing.B) {
	s, _ := newStore(b, standalone(b))
	waitbench.Run(b, s)
}

// requireClosed requires changed to be closed within wokenWithin.
func requireClosed(t *testing.T, changed <-chan struct{}, why string) {
	t.Helper()
	eventually(t, "a wake-up after "+why, wokenWithin, func() bool {
		select {
		case <-changed:
			return true
		default:
			return false
		}
	})
}

// TestTakeoverKeepsTheMark: a watcher of a key whose owner's lease lapses
// is not woken by the claim that takes the key over, and is woken by that
// claim's completion.
func TestTakeoverKeepsTheMark(t *testing.T) {
	s, _ := newStore(t, standalone(t))
	ctx := t.Context()
	first, claimed, err := s.Claim(ctx, "k", "fp", "first", 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, claimed)
	changed := watch(t, s, "k")
	time.Sleep(300 * time.Millisecond)
	second, claimed, err := s.Claim(ctx, "k", "fp", "second", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed, "the lapsed lease is taken over")
	require.Greater(t, second.Owner.Fence, first.Owner.Fence)
	select {
	case <-changed:
		t.Fatal("woken by the takeover")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, s.Complete(ctx, "k", second.Owner, nil, time.Minute))
	requireClosed(t, changed, "the watcher, by the takeover's completion")
}
