package redisstore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestReplicationDetected: a store without a replica option reports that
// it has not asked until its first Ping or write, then what it found: the
// shared servers (standalone, a Cluster of masters, Sentinel's master)
// have no replica and get no wait; a Ring cannot route WAIT and gets none;
// a primary with a replica, or a Cluster whose master has one, gets one, with four fifths of the client's
// ReadTimeout (go-redis's default of 5 s when none is set).
func TestReplicationDetected(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr(t)}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	primary, _ := startReplicated(t)
	for _, tc := range []struct {
		name     string
		client   func(t *testing.T) redis.UniversalClient
		replicas int
		timeout  time.Duration
		reason   string
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return standalone(t) }, 0, 0, "found no replica on the primary"},
		{"cluster", func(t *testing.T) redis.UniversalClient { return cluster(t) }, 0, 0, "found no replica on the Cluster's 3 shard(s)"},
		{"sentinel", func(t *testing.T) redis.UniversalClient { return sentinel(t) }, 0, 0, "found no replica on the master the Sentinels name"},
		{"ring", func(*testing.T) redis.UniversalClient { return ring }, 0, 0, "a *redis.Ring cannot send WAIT"},
		{"primary with a replica", func(t *testing.T) redis.UniversalClient {
			return primaryClient(t, primary, func(*redis.Options) {})
		}, 1, 4 * time.Second, "found 1 replica(s) on the primary"},
		{"primary with a replica, ReadTimeout 10s", func(t *testing.T) redis.UniversalClient {
			return primaryClient(t, primary, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
		}, 1, 8 * time.Second, "found 1 replica(s) on the primary"},
		{"Cluster with a replica", func(t *testing.T) redis.UniversalClient { return replicatedCluster(t) },
			1, 4 * time.Second, "found 1 replica(s) on the Cluster's 1 shard(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redisstore.New(tc.client(t), redisstore.WithLogger(slog.New(slog.DiscardHandler))) // writes nothing
			assert.Equal(t, 0, s.Replication().Replicas)
			assert.Contains(t, s.Replication().Reason, "not asked yet")
			require.NoError(t, s.Ping(t.Context()))
			r := s.Replication()
			assert.Equal(t, tc.replicas, r.Replicas, r.Reason)
			assert.Equal(t, tc.timeout, r.Timeout)
			assert.Contains(t, r.Reason, tc.reason)
		})
	}
}

// TestReplicationChosen: an option's choice is in force from New on, and
// the server is never asked.
func TestReplicationChosen(t *testing.T) {
	primary, _ := startReplicated(t)
	client := primary.client(t)
	for _, tc := range []struct {
		name string
		opt  redisstore.Option
		want redisstore.Replication
	}{
		{"without", redisstore.WithoutReplicaAcks(), redisstore.Replication{Reason: "chosen with WithoutReplicaAcks"}},
		{"with", redisstore.WithReplicaAcks(2, time.Second), redisstore.Replication{Replicas: 2, Timeout: time.Second, Reason: "chosen with WithReplicaAcks"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &commandLog{}
			client.AddHook(log)
			s, _ := newStore(t, client, tc.opt)
			assert.Equal(t, tc.want, s.Replication())
			require.NoError(t, s.Ping(t.Context()))
			assert.Equal(t, tc.want, s.Replication())
			assert.NotContains(t, strings.Join(log.take(), " "), "info", "the server was asked")
		})
	}
}

// TestReplicationDefaultClient: on a client built the go-redis default way
// (maintenance notifications in auto mode, the default ReadTimeout), a
// store without options finds the replica, and 32 goroutines racing for 20
// keys each get one winner per key, every winning claim waiting for the
// replica; run under -race, it also shows the claims share no client
// options with go-redis's set-up of new connections.
func TestReplicationDefaultClient(t *testing.T) {
	primary, _ := startReplicated(t)
	client := redis.NewClient(&redis.Options{Addr: primary.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, redisstore.LoadScripts(t.Context(), client), "as after their first calls")
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(t, client)
	var mu sync.Mutex
	winners := map[string]int{}
	var racers sync.WaitGroup
	for g := range 32 {
		racers.Go(func() {
			for k := range 20 {
				key := fmt.Sprintf("key-%d", k)
				_, claimed, err := s.Claim(t.Context(), key, "fp", fmt.Sprintf("token-%d", g), time.Minute)
				assert.NoError(t, err)
				if claimed {
					mu.Lock()
					winners[key]++
					mu.Unlock()
				}
			}
		})
	}
	racers.Wait()
	assert.Equal(t, 1, s.Replication().Replicas, s.Replication().Reason)
	for k := range 20 {
		assert.Equal(t, 1, winners[fmt.Sprintf("key-%d", k)], "winners of key-%d", k)
	}
	acked := 0
	for _, trip := range log.take() {
		if strings.HasSuffix(trip, " wait") {
			acked++
		}
	}
	assert.Equal(t, 20, acked, "round trips that waited for the replica")
}

// TestReplicationRechecked: a store that found no replica asks again once
// its re-check is due, in the background, and waits for the replica it
// finds; from then on it keeps waiting, so that with the replica gone a
// claim is refused (ErrNotReplicated) rather than left to a failover.
func TestReplicationRechecked(t *testing.T) {
	primary := startRedis(t, freePort(t), "")
	client := primary.client(t)
	s, _ := newStore(t, client)
	_, claimed, err := s.Claim(t.Context(), "before", "fp", "token", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, 0, s.Replication().Replicas)

	replica := startRedis(t, freePort(t), "", replicaOf(primary.addr())...)
	waitForReplica(t, replica)
	redisstore.RecheckReplicationNow(s)
	eventually(t, "the store waits for the replica", 10*time.Second, func() bool {
		_, _, err := s.Claim(t.Context(), "during", "fp", "token", time.Minute)
		require.NoError(t, err)
		return s.Replication().Replicas == 1
	})
	_, claimed, err = s.Claim(t.Context(), "acknowledged", "fp", "token", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)

	replica.kill()
	eventually(t, "the primary has no replica left", 10*time.Second, func() bool {
		info, err := client.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
	redisstore.RecheckReplicationNow(s)
	_, claimed, err = s.Claim(t.Context(), "after", "fp", "token", time.Minute)
	require.ErrorIs(t, err, redisstore.ErrNotReplicated)
	assert.False(t, claimed)
	assert.Equal(t, 1, s.Replication().Replicas, "still waiting for a replica")
}

// TestReplicationRefused: a server whose ACL refuses INFO gets no wait, and
// the warning names the choice to make.
func TestReplicationRefused(t *testing.T) {
	srv := startRedis(t, freePort(t), "user default on nopass ~* &* +@all -info\n")
	s, _ := newStore(t, srv.client(t))
	require.NoError(t, s.Ping(t.Context()))
	r := s.Replication()
	assert.Equal(t, 0, r.Replicas)
	assert.Contains(t, r.Reason, "the server refused to say whether it has replicas")
	assert.Contains(t, r.Reason, "choose WithReplicaAcks or WithoutReplicaAcks")
}

// TestReplicationLoggedOnce: many requests racing through the middleware
// on a fresh store log the replica acknowledgement in force once.
func TestReplicationLoggedOnce(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &mu}, nil))
	s, _ := newStore(t, standalone(t), redisstore.WithLogger(logger))
	handler := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	var senders sync.WaitGroup
	for i := range 32 {
		senders.Go(func() { assert.Equal(t, http.StatusCreated, post(handler, "/payments", fmt.Sprint("key-", i))) })
	}
	senders.Wait()
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, 1, logged.String())
	assert.Contains(t, lines[0], `msg="redisstore: replica acknowledgements" replicas=0`)
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// primaryClient is a client of srv with go-redis's defaults but for
// ContextTimeoutEnabled, and edit's changes, closed when the test ends.
func primaryClient(t *testing.T, srv *redisServer, edit func(*redis.Options)) *redis.Client {
	opts := &redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true}
	edit(opts)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// redisAddr is the host:port of REDIS_URL.
func redisAddr(t *testing.T) string {
	opts, err := redis.ParseURL(redisURL(t))
	require.NoError(t, err)
	return opts.Addr
}

// replicatedCluster starts a Cluster of one master, holding every slot,
// and its replica, and returns a client of it with go-redis's defaults
// but for ContextTimeoutEnabled, closed when the test ends.
func replicatedCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	ctx := t.Context()
	node := func() (*redisServer, *redis.Client, int) {
		// The bus port is chosen too: the default, the port plus 10000, may be taken or out of range.
		bus := freePort(t)
		srv := startRedis(t, freePort(t), fmt.Sprintf("cluster-enabled yes\ncluster-port %d\n", bus))
		return srv, srv.client(t), bus
	}
	master, masterClient, _ := node()
	replica, replicaClient, replicaBus := node()
	require.NoError(t, masterClient.ClusterAddSlotsRange(ctx, 0, 16383).Err())
	require.NoError(t, masterClient.Do(ctx, "cluster", "meet", "127.0.0.1", replica.port, replicaBus).Err())
	id, err := masterClient.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	eventually(t, "the replica knows the master", 10*time.Second, func() bool {
		nodes, err := replicaClient.ClusterNodes(ctx).Result()
		return err == nil && strings.Contains(nodes, id)
	})
	require.NoError(t, replicaClient.ClusterReplicate(ctx, id).Err())
	eventually(t, "the Cluster is up with its replica in sync", 20*time.Second, func() bool {
		info, err := masterClient.Info(ctx, "replication").Result()
		state, serr := replicaClient.ClusterInfo(ctx).Result()
		return err == nil && serr == nil && strings.Contains(info, "connected_slaves:1") &&
			strings.Contains(info, "state=online") && strings.Contains(state, "cluster_state:ok")
	})
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{master.addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	return client
}
