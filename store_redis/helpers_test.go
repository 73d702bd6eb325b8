package redisstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
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
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
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

// redisURL returns REDIS_URL, and skips the test when it is unset: every
// Redis test runs only then, those that start servers of their own too.
func redisURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the Redis store tests")
	}
	return url
}

// standaloneWith is standalone with the client's options changed by edit.
func standaloneWith(t testing.TB, edit func(*redis.Options)) redis.UniversalClient {
	t.Helper()
	url := redisURL(t)
	opts, err := redis.ParseURL(url)
	require.NoError(t, err, "REDIS_URL")
	opts.ContextTimeoutEnabled = true
	opts.MaintNotificationsConfig = noMaintNotifications
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
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), PoolSize: 64,
		ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications})
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
		MasterName:            master,
		SentinelAddrs:         strings.Split(addrs, ","),
		PoolSize:              64,
		ContextTimeoutEnabled: true,
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

// recordKey is the Redis key of key's record in a store with prefix: the
// layout the package documents, which records already stored keep.
func recordKey(prefix, key string) string {
	return prefix + "{" + store.HashKey(key) + "}"
}

// newStore returns a store on client with a prefix of its own, and deletes
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
	quiet := slog.New(slog.DiscardHandler)
	return redisstore.New(client, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithLogger(quiet)}, opts...)...), prefix
}

// forEachNode calls fn with each master of a Cluster, or with the one
// server of a standalone client.
func forEachNode(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, fn)
	}
	return fn(ctx, client.(*redis.Client))
}

// commandLog is a go-redis hook that records every round trip the client
// makes: a command's name, or a pipeline's names, space-separated.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}

// add logs one round trip: the names of its commands, space-separated.
func (l *commandLog) add(cmds ...redis.Cmder) {
	names := make([]string, len(cmds))
	for i, cmd := range cmds {
		names[i] = cmd.Name()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, strings.Join(names, " "))
}

// take returns the round trips logged since the last take, and forgets
// them.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

// post sends h a POST of a small JSON body to path with key as its
// Idempotency-Key, and returns the status h answered.
func post(h http.Handler, path, key string) int {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// startProxy starts a tcpproxy to target, closed when the test ends.
func startProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	proxy, err := tcpproxy.Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
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
func startRedis(t testing.TB, port int, conf string, args ...string) *redisServer {
	t.Helper()
	redisURL(t)
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

// noMaintNotifications turns go-redis's maintenance notifications off: the
// test servers have none (TestReplicationDefaultClient keeps the default).
var noMaintNotifications = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

// client returns a client of the server alone, closed when the test ends.
func (s *redisServer) client(t testing.TB) *redis.Client {
	client := redis.NewClient(&redis.Options{Addr: s.addr(), PoolSize: 64, MaxRetries: -1, ContextTimeoutEnabled: true,
		MaintNotificationsConfig: noMaintNotifications})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// replicaOf returns the redis-server arguments that make it a replica of
// the server at addr (host:port).
func replicaOf(addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	return []string{"--replicaof", host, port}
}

// waitForReplica waits until replica has finished its sync with its primary.
func waitForReplica(t testing.TB, replica *redisServer) {
	t.Helper()
	client := replica.client(t)
	// Generous: a full sync forks the primary, which on a loaded machine
	// (a CI running several modules' tests at once) has taken over 10 s.
	eventually(t, "the replica on "+replica.addr()+" is in sync", 30*time.Second, func() bool {
		info, err := client.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// replicatedPrimary starts a primary and a replica of it, and returns a
// client of the primary.
func replicatedPrimary(t testing.TB) *redis.Client {
	t.Helper()
	primary, _ := startReplicated(t)
	return primary.client(t)
}

// startReplicated starts a primary and a replica of it, and returns both
// once the replica is in sync.
func startReplicated(t testing.TB) (primary, replica *redisServer) {
	t.Helper()
	primary = startRedis(t, freePort(t), "")
	replica = startRedis(t, freePort(t), "", replicaOf(primary.addr())...)
	waitForReplica(t, replica)
	return primary, replica
}

// freePort returns a loopback port that nothing listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// eventually polls cond until it holds, failing the test after within.
func eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for: %s", within, what)
		}
	}
}

// serverWork is what INFO commandstats counts on a server: the commands it
// ran and the microseconds it spent in them, INFO's own calls left out.
type serverWork struct{ calls, usec int64 }

// commandStat matches one command's line of INFO commandstats.
var commandStat = regexp.MustCompile(`(?m)^cmdstat_([^:]+):calls=(\d+),usec=(\d+),`)

// serverWorkOf returns the work INFO commandstats has counted so far on
// client's server.
func serverWorkOf(tb testing.TB, client redis.UniversalClient) serverWork {
	tb.Helper()
	var w serverWork
	for name, cmd := range commandWorkOf(tb, client) {
		if name != "info" {
			w.calls += cmd.calls
			w.usec += cmd.usec
		}
	}
	return w
}

// commandWorkOf returns, by command name, the work INFO commandstats has
// counted so far on client's server, INFO's own calls included.
func commandWorkOf(tb testing.TB, client redis.UniversalClient) map[string]serverWork {
	tb.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(tb, err)
	work := map[string]serverWork{}
	for _, m := range commandStat.FindAllStringSubmatch(info, -1) {
		calls, _ := strconv.ParseInt(m[2], 10, 64)
		usec, _ := strconv.ParseInt(m[3], 10, 64)
		work[m[1]] = serverWork{calls: calls, usec: usec}
	}
	return work
}

// since returns the work done between earlier and w.
func (w serverWork) since(earlier serverWork) serverWork {
	return serverWork{calls: w.calls - earlier.calls, usec: w.usec - earlier.usec}
}

// lapsedTakeover claims key through first, under the token "stale" and
// a lease of 100 ms, lets the lease lapse, then takes the key over
// through second, under the token "current", and returns both leases.
func lapsedTakeover(t *testing.T, first, second *redisstore.Store, key string) (stale, current store.Lease) {
	t.Helper()
	ctx := t.Context()
	old, claimed, err := first.Claim(ctx, key, "fp-stale", "stale", 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, claimed)
	time.Sleep(300 * time.Millisecond)
	taken, claimed, err := second.Claim(ctx, key, "fp-current", "current", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed, "the lapsed lease is taken over")
	require.Equal(t, old.Owner.Fence+1, taken.Owner.Fence)
	return old.Owner, taken.Owner
}
