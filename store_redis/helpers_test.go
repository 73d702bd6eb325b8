package redisstore_test

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// server is one Redis deployment the tests run against.
type server struct {
	name   string
	client func(t testing.TB) redis.UniversalClient
}

// servers are the deployments tests run against: standalone Redis from
// REDIS_URL, a Redis Cluster from REDIS_CLUSTER_ADDRS, and the master a
// Redis Sentinel names, from REDIS_SENTINEL.
var servers = []server{
	{"standalone", standalone},
	{"cluster", cluster},
	{"sentinel", sentinel},
}

// forEachServer runs test once per deployment, as parallel subtests named
// after them.
func forEachServer(t *testing.T, test func(t *testing.T, client redis.UniversalClient)) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			client := srv.client(t)
			t.Parallel()
			test(t, client)
		})
	}
}

// standalone returns a client for REDIS_URL. It skips the test when the
// variable is unset and fails it when the server does not answer.
func standalone(t testing.TB) redis.UniversalClient {
	t.Helper()
	return standaloneWith(t, func(opts *redis.Options) { opts.PoolSize = 64 })
}

// standaloneWith is standalone with the client's options changed by edit.
func standaloneWith(t testing.TB, edit func(*redis.Options)) redis.UniversalClient {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the Redis store tests")
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err, "REDIS_URL")
	edit(opts)
	return reachable(t, redis.NewClient(opts), "REDIS_URL="+url)
}

// cluster returns a client for the Redis Cluster whose nodes
// REDIS_CLUSTER_ADDRS lists. It skips the test when the variable is unset
// and fails it when the cluster does not answer.
func cluster(t testing.TB) redis.UniversalClient {
	t.Helper()
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Skip("REDIS_CLUSTER_ADDRS is not set; set it (e.g. 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002) to run the Redis Cluster tests")
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), PoolSize: 64})
	return reachable(t, client, "REDIS_CLUSTER_ADDRS="+addrs)
}

// sentinel returns a failover client for the master that REDIS_SENTINEL
// names, written master@host:port[,host:port...]: the client asks those
// Sentinels where the master is. It skips the test when the variable is
// unset and fails it when the master cannot be reached through them.
func sentinel(t testing.TB) redis.UniversalClient {
	t.Helper()
	spec := os.Getenv("REDIS_SENTINEL")
	if spec == "" {
		t.Skip("REDIS_SENTINEL is not set; set it (e.g. idempotency@127.0.0.1:26379) to run the Redis Sentinel tests")
	}
	master, addrs, ok := strings.Cut(spec, "@")
	require.True(t, ok && master != "" && addrs != "", "REDIS_SENTINEL=%q is not master@host:port[,host:port...]", spec)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    master,
		SentinelAddrs: strings.Split(addrs, ","),
		PoolSize:      64,
	})
	return reachable(t, client, "REDIS_SENTINEL="+spec)
}

// reachable fails the test unless client's server answers a PING, and
// closes the client when the test ends.
func reachable(t testing.TB, client redis.UniversalClient, what string) redis.UniversalClient {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, client.Ping(ctx).Err(), "%s is set but the server does not answer", what)
	return client
}

// newStore returns a store on client with a prefix of its own, and deletes
// recordKey is the Redis key of key's record in a store with prefix: the
// layout the package documents, which records already stored keep.
func recordKey(prefix, key string) string {
	return prefix + "{" + store.HashKey(key) + "}"
}

// every key under that prefix when the test ends.
func newStore(t testing.TB, client redis.UniversalClient, opts ...redisstore.Option) (*redisstore.Store, string) {
	t.Helper()
	prefix := "redisstore-test:" + rand.Text() + ":"
	t.Cleanup(func() {
		require.NoError(t, forEachNode(context.Background(), client, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for iter.Next(ctx) {
					p.Del(ctx, iter.Val())
				}
				return iter.Err()
			})
			return err
		}), "deleting the test's keys")
	})
	return redisstore.New(client, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...), prefix
}

// forEachNode calls fn with each master of a Cluster, or with the one
// server of a standalone client.
func forEachNode(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, fn)
	}
	return fn(ctx, client.(*redis.Client))
}
