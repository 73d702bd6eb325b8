package redisstore_test

import (
	"context"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestSubscriberShared: on a server of the test's own, watches of many
// keys, several per key, share one pub/sub connection and one
// subscription per key; a key whose watches were woken and stopped is
// unsubscribed from while another is still watched; and once every watch
// has stopped, the connection and its goroutine are gone.
func TestSubscriberShared(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	goroutines := runtime.NumGoroutine()
	const keys, perKey = 10, 3
	owners := make([]store.Lease, keys)
	stops := make([][]func(), keys)
	changed := make([][]<-chan struct{}, keys)
	for k := range keys {
		owners[k] = claim(t, s, strconv.Itoa(k))
		changed[k], stops[k] = make([]<-chan struct{}, perKey), make([]func(), perKey)
	}
	var started sync.WaitGroup
	for k := range keys {
		for w := range perKey {
			started.Go(func() {
				var err error
				changed[k][w], stops[k][w], err = s.Watch(t.Context(), strconv.Itoa(k))
				assert.NoError(t, err)
			})
		}
	}
	started.Wait()
	require.False(t, t.Failed())
	assert.Equal(t, []int{keys}, shardSubscriptions(t, client), "one connection, one subscription per key")

	for k := 1; k < keys; k++ {
		require.NoError(t, s.Complete(t.Context(), strconv.Itoa(k), owners[k], nil, time.Minute))
		for w := range perKey {
			requireClosed(t, changed[k][w], "Complete of key "+strconv.Itoa(k))
			stops[k][w]()
		}
	}
	eventually(t, "only key 0 is still subscribed to", wokenWithin, func() bool {
		subs := shardSubscriptions(t, client)
		return len(subs) == 1 && subs[0] == 1
	})
	for _, stop := range stops[0] {
		stop()
	}
	requireFreed(t, client, goroutines)
}

// TestSubscriberDropped: when the server drops the shared connection
// (CLIENT KILL of every pub/sub connection, on a server of the test's
// own), every watch is woken rather than left waiting for a publication
// it can no longer hear, although the keys are still in flight; a watch
// started after it subscribes anew and is woken by a completion.
func TestSubscriberDropped(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	ctx := t.Context()
	var watches []<-chan struct{}
	for _, key := range []string{"a", "a", "b"} {
		claim(t, s, key)
		watches = append(watches, watch(t, s, key))
	}
	require.NoError(t, client.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	for i, changed := range watches {
		requireClosed(t, changed, "the kill of the connection, for watch "+strconv.Itoa(i))
	}

	owner := claim(t, s, "c")
	changed := watch(t, s, "c")
	require.NoError(t, s.Complete(ctx, "c", owner, nil, time.Minute))
	requireClosed(t, changed, "Complete after the kill")
}

// TestSubscriberStorm: goroutines racing on a few keys, each watching,
// some stopping before the completion (by stop or by the end of their
// context), and the keys' owners completing or releasing them meanwhile:
// every watch still waiting for a key when it leaves flight is woken, and
// once all have stopped, neither a goroutine nor a connection is left.
func TestSubscriberStorm(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	goroutines := runtime.NumGoroutine()
	const rounds, keys, watchers = 20, 4, 8
	for round := range rounds {
		var racing sync.WaitGroup
		for k := range keys {
			key := strconv.Itoa(round) + "-" + strconv.Itoa(k)
			owner := claim(t, s, key)
			for w := range watchers {
				racing.Go(func() { watchUntilWoken(t, s, key, w%3) })
			}
			racing.Go(func() {
				time.Sleep(rand.N(5 * time.Millisecond))
				if k%2 == 0 {
					assert.NoError(t, s.Release(t.Context(), key, owner))
					return
				}
				assert.NoError(t, s.Complete(t.Context(), key, owner, nil, time.Minute))
			})
		}
		racing.Wait()
	}
	requireFreed(t, client, goroutines)
}

// TestSubscriberContextEnds: watches of in-flight keys whose contexts
// end, with no stop yet, leave neither a goroutine nor a connection.
func TestSubscriberContextEnds(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	goroutines := runtime.NumGoroutine()
	for k := range 10 {
		key := strconv.Itoa(k)
		claim(t, s, key)
		ctx, cancel := context.WithCancel(t.Context())
		_, stop, err := s.Watch(ctx, key)
		require.NoError(t, err)
		t.Cleanup(stop)
		cancel()
	}
	requireFreed(t, client, goroutines)
}

// watchUntilWoken watches key and, by how: 0 waits for the wake-up, 1
// stops at once, 2 ends its context at once and stops later.
func watchUntilWoken(t *testing.T, s *redisstore.Store, key string, how int) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	changed, stop, err := s.Watch(ctx, key)
	if !assert.NoError(t, err, "Watch(%q)", key) {
		return
	}
	switch how {
	case 0:
		select {
		case <-changed:
		case <-time.After(wokenWithin):
			t.Errorf("no wake-up within %v of the end of %q", wokenWithin, key)
		}
	case 2:
		cancel()
		runtime.Gosched()
	}
	stop()
}

// requireFreed requires that the goroutines come back to goroutines (the
// count before the watches started) and that no pub/sub connection to
// client's server is left, each within wokenWithin.
func requireFreed(t *testing.T, client *redis.Client, goroutines int) {
	t.Helper()
	eventually(t, "the watches' goroutines are gone", wokenWithin, func() bool {
		return runtime.NumGoroutine() <= goroutines
	})
	eventually(t, "the watches' connection is closed", wokenWithin, func() bool {
		return len(shardSubscriptions(t, client)) == 0
	})
}

// claim claims key for a minute and returns the lease.
func claim(t *testing.T, s *redisstore.Store, key string) store.Lease {
	t.Helper()
	rec, claimed, err := s.Claim(t.Context(), key, "fp", "owner "+key, time.Minute)
	require.NoError(t, err)
	require.True(t, claimed, "Claim(%q)", key)
	return rec.Owner
}

// watch watches key and stops the watch when the test ends.
func watch(t *testing.T, s *redisstore.Store, key string) <-chan struct{} {
	t.Helper()
	changed, stop, err := s.Watch(t.Context(), key)
	require.NoError(t, err, "Watch(%q)", key)
	t.Cleanup(stop)
	return changed
}

// shardSubscription matches the shard channel count of a CLIENT LIST line.
var shardSubscription = regexp.MustCompile(`(?m) ssub=(\d+) `)

// shardSubscriptions returns, for each pub/sub connection to client's
// server, how many shard channels it is subscribed to.
func shardSubscriptions(t *testing.T, client *redis.Client) []int {
	t.Helper()
	list, err := client.Do(t.Context(), "client", "list", "type", "pubsub").Text()
	require.NoError(t, err)
	var counts []int
	for _, m := range shardSubscription.FindAllStringSubmatch(list, -1) {
		n, _ := strconv.Atoi(m[1])
		counts = append(counts, n)
	}
	return counts
}
