package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
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
		{"timeout above go-redis's default ReadTimeout", "redisstore: WithReplicaAcks expects a timeout below the client's ReadTimeout",
			func() {
				redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithReplicaAcks(1, 5*time.Second))
			}},
		{"a Ring", "redisstore: WithReplicaAcks expects a *redis.Client or a *redis.ClusterClient",
			func() { redisstore.New(ring, redisstore.WithReplicaAcks(1, time.Second)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.PanicsWithValue(t, tc.panic, tc.build) })
	}
}

// TestMastersMayHaveMoved: a Cluster client's map of masters is reloaded
// after a redirect and after a node that did not answer (a dead master
// answers no MOVED), never after an error the server replied or a missing
// key. The errors are the real ones, from the shared Cluster and a closed
// port.
func TestMastersMayHaveMoved(t *testing.T) {
	client := cluster(t).(*redis.ClusterClient)
	ctx := t.Context()
	const key = "mastersMayHaveMoved"
	owner, err := client.MasterForKey(ctx, key)
	require.NoError(t, err)
	var (
		mu    sync.Mutex // ForEachMaster calls its function on every master at once
		other *redis.Client
	)
	require.NoError(t, client.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Options().Addr != owner.Options().Addr {
			other = m
		}
		return nil
	}))
	require.NotNil(t, other, "the Cluster has a second master")
	moved := other.Get(ctx, key).Err()
	require.True(t, redis.HasErrorPrefix(moved, "MOVED"), "got %v", moved)

	unreachable := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer unreachable.Close()
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"redirect":     {moved, true},
		"no answer":    {unreachable.Ping(ctx).Err(), true},
		"server error": {owner.Do(ctx, "NOSUCHCOMMAND").Err(), false},
		"missing key":  {owner.Get(ctx, key).Err(), false},
		"no error":     {nil, false},
	} {
		require.Equal(t, c.want, redisstore.MastersMayHaveMoved(c.err), "%s: %v", name, c.err)
	}
}

// TestReplicaAcksConformance runs the shared store suite with every write
// waiting for a replica, on a primary and replica of the test's own.
func TestReplicaAcksConformance(t *testing.T) {
	client := replicatedPrimary(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, 2*time.Second))
		return s
	})
}

// TestReplicaAcksRoundTrips: with replica acks, through the middleware, a
// claim that takes the key is its pipeline, then a renewal of the lease and
// WAIT in one pipeline; a complete is one pipeline of the script and WAIT;
// and a replay is the claim's pipeline alone.
func TestReplicaAcksRoundTrips(t *testing.T) {
	client := replicatedPrimary(t)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, time.Second))
	handler := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "warm-up")) // loads the scripts
	log.take()

	require.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
	assert.Equal(t, []string{"pttl set", "evalsha wait", "evalsha wait"}, log.take(), "claim, complete")
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
	assert.Equal(t, []string{"pttl set"}, log.take(), "a replay: claim")
}

// TestReplicaAcksTooFew: on servers without replicas (the shared
// standalone Redis, the Cluster's masters, Sentinel's master), every write
// returns ErrNotReplicated, yet reached the primary; a Claim releases its
// claim, so the next one takes the key at once. On a Cluster, WAIT goes to
// the master of the key's slot, where the script ran, and to no other,
// once: the scripts are loaded on every node first, as after their first
// call, since a NOSCRIPT reply sends the script and its WAIT again.
func TestReplicaAcksTooFew(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := t.Context()
		plain, prefix := newStore(t, client)
		acked := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, 20*time.Millisecond))
		require.NoError(t, forEachNode(ctx, client, func(ctx context.Context, node *redis.Client) error {
			return redisstore.LoadScripts(ctx, node)
		}))

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
			t.Run(tc.op, func(t *testing.T) {
				rec, _, err := plain.Claim(ctx, tc.op, "fp", "token", time.Minute)
				require.NoError(t, err)
				requireNotReplicated(t, tc.op, tc.write(tc.op, rec.Owner))
				_, claimed, err := plain.Claim(ctx, tc.op, "fp", "another token", time.Minute)
				require.NoError(t, err)
				assert.Equal(t, tc.claimedAfter, claimed, "the %s reached the primary", tc.op)
			})
		}
	})
}

// TestReplicaDownAnswersAtOnce: with WithReplicaAcks and the replica
// killed, the answers a claim gives without writing (a replay, a 409 for
// a key in flight, a 422 for a key sent again with another body) wait for
// no replica: the primary runs no WAIT for them, and each comes well
// within the 2 s a WAIT would take. The p99 is logged beside its 100 ms
// target; a loaded machine may exceed that, never the timeout.
// Ten goroutines send each kind 100 times; the lease of an hour keeps
// renewals, which do wait, out of the count.
func TestReplicaDownAnswersAtOnce(t *testing.T) {
	const replicaDownAcks = 2 * time.Second
	primary, replica := startReplicated(t)
	client := primary.client(t)
	s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, replicaDownAcks))
	entered, finish := make(chan struct{}), make(chan struct{})
	handler := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(time.Hour))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-finish
		}
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "done"))
	slow := make(chan int)
	go func() { slow <- post(handler, "/slow", "slow") }()
	<-entered
	replica.kill()
	eventually(t, "the primary has no replica left", 10*time.Second, func() bool {
		info, err := client.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})

	waits := commandWorkOf(t, client)["wait"].calls
	for _, tc := range []struct {
		name, path, key, body string
		want                  int
	}{
		{"replay", "/payments", "done", `{"amount":100}`, http.StatusCreated},
		{"409", "/slow", "slow", `{"amount":100}`, http.StatusConflict},
		{"422", "/payments", "done", `{"amount":200}`, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took := make([]time.Duration, 100)
			var next atomic.Int64
			var senders sync.WaitGroup
			for range 10 {
				senders.Go(func() {
					for i := next.Add(1) - 1; i < int64(len(took)); i = next.Add(1) - 1 {
						r := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
						r.Header.Set("Idempotency-Key", tc.key)
						w := httptest.NewRecorder()
						start := time.Now()
						handler.ServeHTTP(w, r)
						took[i] = time.Since(start)
						assert.Equal(t, tc.want, w.Code)
					}
				})
			}
			senders.Wait()
			slices.Sort(took)
			p99 := took[len(took)*99/100-1]
			t.Logf("p50 %v, p99 %v (target 100ms), max %v", took[len(took)/2], p99, took[len(took)-1])
			assert.Less(t, took[len(took)-1], replicaDownAcks/2, "the slowest answer")
		})
	}
	assert.Equal(t, waits, commandWorkOf(t, client)["wait"].calls, "WAITs the primary ran")
	close(finish)
	<-slow
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

// The failover rig: a primary, a replica that replicates through a link the
// test can cut, and one Sentinel that fails over a second or two after the
// primary dies.
const (
	failoverMaster = "failover"
	// failoverLease is the middleware's lease: it outlasts a failover, so
	// that a Complete sent again reaches the promoted replica before a
	// duplicate may take over a key whose completion was lost.
	failoverLease = 12 * time.Second
	// failoverAcks is how long a write waits for its replica, and for how
	// long a Complete is sent again: it covers the failover too, which
	// takes 1 to 2 s on a quiet machine and took over 5 s in a run of
	// make test, beside the other packages' tests, under -race.
	failoverAcks = 10 * time.Second
)

// TestFailoverKeepsEveryRecord: a duplicate storm runs through the
// middleware while the primary's replication link is cut, the primary is
// killed with SIGKILL, and Sentinel promotes the replica, which lacks what
// the primary wrote after the cut; then every key gets one more duplicate.
// Three failovers, each on a rig of its own, per case. A store built
// without a replica option finds the replica and waits for it, as one with
// WithReplicaAcks(1, ...) does: no key's handler runs twice, since a claim
// the replica never acknowledged gets 503 and never runs, and a completion
// it never acknowledged is sent again to the promoted replica. With
// WithoutReplicaAcks some key runs twice in every failover.
func TestFailoverKeepsEveryRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []redisstore.Option
		replicas int // what Replication reports
		safe     bool
	}{
		{"detected", nil, 1, true},
		{"with replica acks", []redisstore.Option{redisstore.WithReplicaAcks(1, failoverAcks)}, 1, true},
		{"without replica acks", []redisstore.Option{redisstore.WithoutReplicaAcks()}, 0, false},
	} {
		for failover := range 3 {
			t.Run(fmt.Sprintf("%s/failover %d", tc.name, failover+1), func(t *testing.T) {
				rig := startFailoverRig(t)
				s := redisstore.New(rig.client, tc.opts...)
				storm := newDuplicateStorm(t, s)
				storm.start(300, 3, 5*time.Millisecond)
				time.Sleep(600 * time.Millisecond) // the storm is under way
				rig.failOver(t, 400*time.Millisecond)
				storm.wait()
				storm.start(300, 1, 0) // a late duplicate of every key
				storm.wait()

				twice := storm.keysRunTwice()
				t.Logf("%d of %d keys ran twice; %v; store errors: %v", len(twice), 300, s.Replication(), storm.errorCounts())
				require.Len(t, storm.executions, 300, "every key ran")
				assert.Equal(t, tc.replicas, s.Replication().Replicas, "replicas waited for")
				if tc.safe {
					assert.Empty(t, twice, "keys whose handler ran twice")
				} else {
					assert.NotEmpty(t, twice, "keys whose handler ran twice without acknowledgements")
				}
			})
		}
	}
}

// failoverRig is a primary, its replica and a Sentinel watching them, and
// a Sentinel client of whichever is the primary.
type failoverRig struct {
	primary, replica, sentinel *redisServer
	link                       *tcpproxy.Proxy
	client                     *redis.Client
}

// startFailoverRig starts a primary, a replica of it that replicates
// through a tcpproxy (the link), and a Sentinel, and waits until the Sentinel knows the
// replica.
func startFailoverRig(t *testing.T) *failoverRig {
	t.Helper()
	rig := &failoverRig{primary: startRedis(t, freePort(t), "")}
	rig.link = startProxy(t, rig.primary.addr())
	rig.replica = startRedis(t, freePort(t), "", replicaOf(rig.link.Addr())...)
	waitForReplica(t, rig.replica)
	// A long failover-timeout: Sentinel would otherwise soon "fix" the
	// replica to replicate from the primary directly, not through the link.
	rig.sentinel = startRedis(t, freePort(t), fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d 1
sentinel down-after-milliseconds %[1]s 500
sentinel failover-timeout %[1]s 60000
`, failoverMaster, rig.primary.port), "--sentinel")
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: rig.sentinel.addr()})
	t.Cleanup(func() { _ = sentinel.Close() })
	eventually(t, "the Sentinel knows the replica", 10*time.Second, func() bool {
		replicas, err := sentinel.Replicas(t.Context(), failoverMaster).Result()
		return err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "disconnected")
	})
	rig.client = redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            failoverMaster,
		SentinelAddrs:         []string{rig.sentinel.addr()},
		PoolSize:              256,
		ReadTimeout:           failoverAcks + 2*time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = rig.client.Close() })
	return rig
}

// failOver partitions the replication link and lets the primary take, for
// unreplicated, writes the replica never sees; then it kills the primary with SIGKILL,
// waits for the Sentinel to promote the replica, and starts the old
// primary's port again as a replica of the new primary (empty: its data
// died with it), so that writes can be acknowledged again.
func (rig *failoverRig) failOver(t *testing.T, unreplicated time.Duration) {
	t.Helper()
	rig.link.Partition()
	time.Sleep(unreplicated)
	rig.primary.kill()
	require.NoError(t, rig.link.Close(), "closing the link drops what it held")
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: rig.sentinel.addr()})
	t.Cleanup(func() { _ = sentinel.Close() })
	eventually(t, "the Sentinel promotes the replica", 20*time.Second, func() bool {
		addr, err := sentinel.GetMasterAddrByName(t.Context(), failoverMaster).Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(rig.replica.port)
	})
	waitForReplica(t, startRedis(t, rig.primary.port, "", replicaOf(rig.replica.addr())...))
}

// duplicateStorm sends duplicates of many keys to a server whose handler
// counts its runs per key, each duplicate sent again on 503 or 409 until
// it gets its answer.
type duplicateStorm struct {
	t          *testing.T
	server     *httptest.Server
	client     *http.Client
	running    sync.WaitGroup
	mu         sync.Mutex
	executions map[string]int
	errors     map[string]int
}

func newDuplicateStorm(t *testing.T, s *redisstore.Store) *duplicateStorm {
	storm := &duplicateStorm{
		t:          t,
		client:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: 30 * time.Second},
		executions: map[string]int{},
		errors:     map[string]int{},
	}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithLease(failoverLease),
		idempotency.WithStoreTimeout(failoverAcks+time.Second), // a claim's WAIT must not be cut off
		idempotency.WithRetryAfter(time.Second), idempotency.WithErrorHandler(storm.storeFailed))
	storm.server = httptest.NewServer(mw(http.HandlerFunc(storm.handle)))
	t.Cleanup(storm.server.Close)
	t.Cleanup(storm.client.CloseIdleConnections)
	// A test that stops early (a require in the failover) still waits for
	// its senders, whose errors would otherwise come after it ended, hiding
	// its own failure behind a panic.
	t.Cleanup(storm.wait)
	return storm
}

// handle is the protected handler: it counts a run of the request's key.
func (s *duplicateStorm) handle(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.executions[key]++
	run := s.executions[key]
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // a payment takes a moment
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, "%s run %d", key, run)
}

// storeFailed counts the middleware's store errors by kind.
func (s *duplicateStorm) storeFailed(r *http.Request, err error) {
	kind := "other"
	if errors.Is(err, redisstore.ErrNotReplicated) {
		kind = "not replicated"
	}
	op, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "idempotency: "), ":")
	s.mu.Lock()
	s.errors[op+" "+kind]++
	s.mu.Unlock()
}

// start begins to send dups duplicates of each of keys keys, a key every
// spacing, and returns at once.
func (s *duplicateStorm) start(keys, dups int, spacing time.Duration) {
	s.running.Go(func() {
		for i := range keys {
			key := "key-" + strconv.Itoa(i)
			for range dups {
				s.running.Go(func() { s.answer(key) })
			}
			time.Sleep(spacing)
		}
	})
}

func (s *duplicateStorm) wait() { s.running.Wait() }

// answerWithin bounds how long a duplicate of the storm is sent again: past
// a failover's promotion and its new replica's sync, each up to 30 s on a
// loaded machine.
const answerWithin = time.Minute

// answer sends key until it gets a 2xx, sending it again after a 503,
// 409 or transport error.
func (s *duplicateStorm) answer(key string) {
	for deadline := time.Now().Add(answerWithin); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodPost, s.server.URL+"/payments", strings.NewReader(`{"amount":100}`))
		if err != nil {
			s.t.Error(err)
			return
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := s.client.Do(req)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusConflict:
		case resp.StatusCode/100 == 2:
			return
		default:
			s.t.Errorf("key %s: unexpected status %d", key, resp.StatusCode)
			return
		}
	}
	s.t.Errorf("key %s got no answer in %v", key, answerWithin)
}

// keysRunTwice returns the keys whose handler ran more than once.
func (s *duplicateStorm) keysRunTwice() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var twice []string
	for key, n := range s.executions {
		if n > 1 {
			twice = append(twice, key)
		}
	}
	return twice
}

func (s *duplicateStorm) errorCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errors
}

// BenchmarkReplicaAcks measures what WithReplicaAcks(1, ...) costs a first
// request (a Claim of a fresh key and a Complete) and a replay on a
// primary whose replica is up, one request at a time, and reports the
// median time of each, and its round trips, counted by a go-redis hook.
func BenchmarkReplicaAcks(b *testing.B) {
	client := replicatedPrimary(b)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(b, client, redisstore.WithReplicaAcks(1, time.Second))
	claimComplete(b, s, "done") // also loads the scripts
	for _, bc := range []struct {
		name string
		run  func() bool
	}{
		{"first-request", func() bool { return claimComplete(b, s, rand.Text()) }},
		{"replay", func() bool {
			_, claimed, err := s.Claim(b.Context(), "done", "fp", "replay", time.Minute)
			return err == nil && !claimed
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			log.take()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if !bc.run() {
					b.Fatal("the request failed")
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(len(log.take()))/float64(b.N), "round-trips/op")
		})
	}
}
