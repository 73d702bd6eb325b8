package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestReplicaAcksMisconfiguration: WithReplicaAcks and New panic, naming
// the package, on settings that cannot work.
func TestReplicaAcksMisconfiguration(t *testing.T) {
	client := redis.NewClient(&redis.Options{ReadTimeout: 3 * time.Second})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _, _ = client.Close(), ring.Close() })
	for _, tc := range []struct {
		name, panic string
		build       func()
	}{
		{"no replicas", "redisstore: WithReplicaAcks expects n >= 1",
			func() { redisstore.WithReplicaAcks(0, time.Second) }},
		{"no timeout", "redisstore: WithReplicaAcks expects timeout > 0",
			func() { redisstore.WithReplicaAcks(1, 0) }},
		{"timeout not below ReadTimeout", "redisstore: WithReplicaAcks expects a timeout below the client's ReadTimeout",
			func() { redisstore.New(client, redisstore.WithReplicaAcks(1, 3*time.Second)) }},
		{"a Ring", "redisstore: WithReplicaAcks expects a *redis.Client or a *redis.ClusterClient",
			func() { redisstore.New(ring, redisstore.WithReplicaAcks(1, time.Second)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.PanicsWithValue(t, tc.panic, tc.build) })
	}
}

// TestReplicaAcksConformance runs the shared store suite with every write
// waiting for a replica, on a primary and replica of the test's own.
func TestReplicaAcksConformance(t *testing.T) {
	client := replicatedPrimary(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, time.Second))
		return s
	})
}

// TestReplicaAcksRoundTrips: with replica acks, each store call through the
// middleware is still one pipeline of two commands: the script, then WAIT.
func TestReplicaAcksRoundTrips(t *testing.T) {
	client := replicatedPrimary(t)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, time.Second))
	handler := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Code
	}
	require.Equal(t, http.StatusCreated, post("warm-up")) // loads the scripts
	log.take()

	require.Equal(t, http.StatusCreated, post("first"))
	assert.Equal(t, []string{"evalsha", "wait", "evalsha", "wait"}, log.take(), "claim, complete")
	require.Equal(t, http.StatusCreated, post("first"))
	assert.Equal(t, []string{"evalsha", "wait"}, log.take(), "a replay: claim")
}

// TestReplicaAcksTooFew: on servers without replicas (the shared
// standalone Redis, the Cluster's masters, Sentinel's master), every write
// returns ErrNotReplicated, yet reached the primary; a Claim releases its
// claim, so the next one takes the key at once. On a Cluster, WAIT goes to
// the master of the key's slot, where the script ran, and to no other.
func TestReplicaAcksTooFew(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := t.Context()
		plain, prefix := newStore(t, client)
		acked := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, 20*time.Millisecond))

		before := waitCalls(t, client)
		_, claimed, err := acked.Claim(ctx, "claimed", "fp", "token-1", time.Minute)
		after := waitCalls(t, client)
		requireNotReplicated(t, "claim", err)
		assert.False(t, claimed)
		if c, ok := client.(*redis.ClusterClient); ok {
			master, err := c.MasterForKey(ctx, recordKey(prefix, "claimed"))
			require.NoError(t, err)
			assert.Equal(t, map[string]int{master.Options().Addr: 1}, grown(before, after),
				"WAIT runs on the key's master alone")
		}
		rec, claimed, err := plain.Claim(ctx, "claimed", "fp", "token-2", time.Minute)
		require.NoError(t, err)
		assert.True(t, claimed, "the unacknowledged claim was released")
		assert.EqualValues(t, 2, rec.Owner.Fence, "the claim after the release of fencing number 1")

		for _, tc := range []struct {
			op           string
			write        func(key string, owner store.Lease) error
			claimedAfter bool
		}{
			{"renew", func(key string, owner store.Lease) error { return acked.Renew(ctx, key, owner, time.Minute) }, false},
			{"complete", func(key string, owner store.Lease) error { return acked.Complete(ctx, key, owner, nil, time.Minute) }, false},
			{"release", func(key string, owner store.Lease) error { return acked.Release(ctx, key, owner) }, true},
		} {
			rec, _, err := plain.Claim(ctx, tc.op, "fp", "token", time.Minute)
			require.NoError(t, err)
			requireNotReplicated(t, tc.op, tc.write(tc.op, rec.Owner))
			_, claimed, err := plain.Claim(ctx, tc.op, "fp", "another token", time.Minute)
			require.NoError(t, err)
			assert.Equal(t, tc.claimedAfter, claimed, "the %s reached the primary", tc.op)
		}
	})
}

// requireNotReplicated requires err to be op's ErrNotReplicated, counting
// no replica.
func requireNotReplicated(t *testing.T, op string, err error) {
	t.Helper()
	require.ErrorIs(t, err, redisstore.ErrNotReplicated, op)
	assert.NotErrorIs(t, err, store.ErrNotOwner, op)
	assert.Regexp(t, `^redisstore: `+op+`: 0 of 1 replicas acknowledged`, err.Error())
}

// grown returns the counts in after that are higher than in before, by
// how much.
func grown(before, after map[string]int) map[string]int {
	diff := map[string]int{}
	for node, n := range after {
		if n > before[node] {
			diff[node] = n - before[node]
		}
	}
	return diff
}

// waitCalls returns how many WAIT commands each master of client has run.
func waitCalls(t *testing.T, client redis.UniversalClient) map[string]int {
	t.Helper()
	var mu sync.Mutex // a Cluster's masters are asked in parallel
	calls := map[string]int{}
	pattern := regexp.MustCompile(`cmdstat_wait:calls=(\d+)`)
	require.NoError(t, forEachNode(t.Context(), client, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		if m := pattern.FindStringSubmatch(info); m != nil {
			mu.Lock()
			defer mu.Unlock()
			calls[node.Options().Addr], _ = strconv.Atoi(m[1])
		}
		return err
	}))
	return calls
}

// redisServer is a redis-server the test started, in a process group of
// its own, listening on a loopback port with neither RDB nor AOF.
type redisServer struct {
	port int
	cmd  *exec.Cmd
}

// startRedis starts redis-server on port, with conf as the start of its
// configuration file and the extra arguments args, and waits until it
// answers; the server is killed when the test ends. It skips the test when
// REDIS_URL is unset, as every Redis test does.
func startRedis(t *testing.T, port int, conf string, args ...string) *redisServer {
	t.Helper()
	if os.Getenv("REDIS_URL") == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the Redis store tests, " +
			"which then also start redis-server replicas and a Sentinel of their own")
	}
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "REDIS_URL is set, so the replication tests run, and they need redis-server on PATH")
	dir := t.TempDir()
	confFile := filepath.Join(dir, "redis.conf")
	require.NoError(t, os.WriteFile(confFile, []byte(conf), 0o600))
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	args = append([]string{confFile, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}, args...)
	srv := &redisServer{port: port, cmd: exec.Command(bin, args...)}
	srv.cmd.Stdout, srv.cmd.Stderr = logFile, logFile
	srv.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, srv.cmd.Start())
	t.Cleanup(srv.kill)
	client := srv.client(t)
	eventually(t, fmt.Sprintf("redis-server %v answers (log: %s)", args, logFile.Name()), 10*time.Second, func() bool {
		return client.Ping(t.Context()).Err() == nil
	})
	return srv
}

// kill sends SIGKILL to the server's process group and reaps it; killing
// it again does nothing.
func (s *redisServer) kill() {
	if s.cmd.ProcessState == nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

// client returns a client of the server alone, closed when the test ends.
func (s *redisServer) client(t *testing.T) *redis.Client {
	client := redis.NewClient(&redis.Options{Addr: s.addr(), PoolSize: 64, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// waitForReplica waits until replica has finished its sync with its primary.
func waitForReplica(t *testing.T, replica *redisServer) {
	t.Helper()
	client := replica.client(t)
	eventually(t, "the replica on "+replica.addr()+" is in sync", 10*time.Second, func() bool {
		info, err := client.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// replicatedPrimary starts a primary and a replica of it, and returns a
// client of the primary.
func replicatedPrimary(t *testing.T) *redis.Client {
	t.Helper()
	primary := startRedis(t, freePort(t), "")
	waitForReplica(t, startRedis(t, freePort(t), "", "--replicaof", "127.0.0.1", strconv.Itoa(primary.port)))
	return primary.client(t)
}

// freePort returns a loopback port that nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// eventually polls cond until it holds, failing the test after within.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for: %s", within, what)
		}
	}
}
