package redisstore_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// The failover rig: a primary, a replica that replicates through a link the
// test can cut, and one Sentinel that fails over a second or two after the
// primary dies.
const (
	failoverMaster = "failover"
	// failoverLease is the middleware's lease: it outlasts a failover, so
	// that a Complete sent again reaches the promoted replica before a
	// duplicate may take over a key whose completion was lost.
	failoverLease = 5 * time.Second
	// failoverAcks is how long a write waits for its replica, and for how
	// long a Complete is sent again: it covers the failover too.
	failoverAcks = 4 * time.Second
)

// TestFailoverKeepsEveryRecord: a duplicate storm runs through the
// middleware while the primary's replication link is cut, the primary is
// killed with SIGKILL, and Sentinel promotes the replica, which lacks what
// the primary wrote after the cut; then every key gets one more duplicate.
// With WithReplicaAcks(1, ...) no key's handler runs twice: a claim the
// replica never acknowledged gets 503 and never runs, and a completion it
// never acknowledged is sent again to the promoted replica. Without the
// option, the count of keys run twice is only logged: the loss is likely,
// not certain.
func TestFailoverKeepsEveryRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"with replica acks", []redisstore.Option{redisstore.WithReplicaAcks(1, failoverAcks)}},
		{"without replica acks", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := startFailoverRig(t)
			storm := newDuplicateStorm(t, redisstore.New(rig.client, tc.opts...))
			storm.start(300, 3, 5*time.Millisecond)
			time.Sleep(600 * time.Millisecond) // the storm is under way
			rig.failOver(t, 400*time.Millisecond)
			storm.wait()
			storm.start(300, 1, 0) // a late duplicate of every key
			storm.wait()

			twice := storm.keysRunTwice()
			t.Logf("%d of %d keys ran twice; store errors: %v", len(twice), 300, storm.errorCounts())
			require.Len(t, storm.executions, 300, "every key ran")
			if tc.opts != nil {
				assert.Empty(t, twice, "keys whose handler ran twice")
			}
		})
	}
}

// failoverRig is a primary, its replica and a Sentinel watching them, and
// a Sentinel client of whichever is the primary.
type failoverRig struct {
	primary, replica, sentinel *redisServer
	link                       *replicationLink
	client                     *redis.Client
}

// startFailoverRig starts a primary, a replica of it through a
// replicationLink, and a Sentinel, and waits until the Sentinel knows the
// replica.
func startFailoverRig(t *testing.T) *failoverRig {
	t.Helper()
	rig := &failoverRig{primary: startRedis(t, freePort(t), "")}
	rig.link = newReplicationLink(t, rig.primary.addr())
	rig.replica = startRedis(t, freePort(t), "", "--replicaof", "127.0.0.1", strconv.Itoa(rig.link.port()))
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
		MasterName:    failoverMaster,
		SentinelAddrs: []string{rig.sentinel.addr()},
		PoolSize:      256,
		ReadTimeout:   failoverAcks + 2*time.Second,
	})
	t.Cleanup(func() { _ = rig.client.Close() })
	return rig
}

// failOver cuts the replication link, lets the primary take writes the
// replica never sees for unreplicated, then kills the primary with SIGKILL,
// waits for the Sentinel to promote the replica, and starts the old
// primary's port again as a replica of the new primary (empty: its data
// died with it), so that writes can be acknowledged again.
func (rig *failoverRig) failOver(t *testing.T, unreplicated time.Duration) {
	t.Helper()
	rig.link.cut()
	time.Sleep(unreplicated)
	rig.primary.kill()
	rig.link.close()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: rig.sentinel.addr()})
	t.Cleanup(func() { _ = sentinel.Close() })
	eventually(t, "the Sentinel promotes the replica", 20*time.Second, func() bool {
		addr, err := sentinel.GetMasterAddrByName(t.Context(), failoverMaster).Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(rig.replica.port)
	})
	waitForReplica(t, startRedis(t, rig.primary.port, "", "--replicaof", "127.0.0.1", strconv.Itoa(rig.replica.port)))
}

// replicationLink is a TCP proxy that a replica replicates through. Once
// cut, it drops every byte either way, as a partition would, and the
// primary's writes from then on never reach the replica.
type replicationLink struct {
	ln     net.Listener
	target string
	isCut  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// newReplicationLink listens on a loopback port and forwards each
// connection to target; it is closed when the test ends.
func newReplicationLink(t *testing.T, target string) *replicationLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &replicationLink{ln: ln, target: target}
	go l.accept()
	t.Cleanup(l.close)
	return l
}

func (l *replicationLink) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

func (l *replicationLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		go l.forward(out, in)
		go l.forward(in, out)
	}
}

// forward copies src to dst until either fails, dropping what it reads
// once the link is cut.
func (l *replicationLink) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if l.isCut.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (l *replicationLink) cut() { l.isCut.Store(true) }

// close stops accepting and closes every connection; what they held is
// lost.
func (l *replicationLink) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
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
		idempotency.WithRetryAfter(time.Second), idempotency.WithErrorHandler(storm.storeFailed))
	storm.server = httptest.NewServer(mw(http.HandlerFunc(storm.handle)))
	t.Cleanup(storm.server.Close)
	t.Cleanup(storm.client.CloseIdleConnections)
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

// answer sends key until it gets a 2xx, sending it again after a 503,
// 409 or transport error.
func (s *duplicateStorm) answer(key string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
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
	s.t.Errorf("key %s got no answer in 30 s", key)
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
