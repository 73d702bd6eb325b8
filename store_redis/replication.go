package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// recheckEvery is how often a store that found no replica asks again, in
// the background, so that a replica that connects after start-up is
// waited for soon, at the cost of one INFO per interval.
const recheckEvery = 10 * time.Second

// recheckWithin bounds a background re-check.
const recheckWithin = 5 * time.Second

// Replication is the replica acknowledgement a store's writes get: each
// claim that takes a key, renewal, completion and release waits up to
// Timeout for Replicas replicas (0: for none). Reason says who chose it,
// or what the store found on the server.
type Replication struct {
	Replicas int
	Timeout  time.Duration
	Reason   string
}

// String describes r for logs and health checks.
func (r Replication) String() string {
	if r.Replicas == 0 {
		return "writes do not wait for replicas: " + r.Reason
	}
	return fmt.Sprintf("writes wait up to %v for %d replica(s): %s", r.Timeout, r.Replicas, r.Reason)
}

// WithoutReplicaAcks makes writes never wait for replicas, whatever the
// server has: a failover may then lose the last claims and records, and a
// duplicate run again (see docs/redis.md). Defaults to detection: see New.
func WithoutReplicaAcks() Option {
	return func(s *Store) {
		s.chosen = &Replication{Reason: "chosen with WithoutReplicaAcks"}
	}
}

// WithLogger sets where the store logs the replica acknowledgement in
// force, once it is known and when it changes. Defaults to slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("redisstore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

// replication is the store's Replication: chosen by an option, or found on
// the server by the first write or Ping and, while it finds no replica,
// again every recheckEvery. Once replicas are found the store keeps
// waiting for one: a replica that goes away means refused claims, never
// writes a failover may silently lose.
type replication struct {
	current   atomic.Pointer[Replication] // nil until detected
	detecting sync.Mutex                  // the first detection
	rechecked atomic.Int64                // UnixNano of the last detection
	checking  atomic.Bool                 // a background re-check is running
}

// replication returns the Replication in force, finding it on the server
// first if nothing has yet; a call that fails to reach the server returns
// the error, and the next call asks again.
func (s *Store) replication(ctx context.Context) (Replication, error) {
	if r := s.acks.current.Load(); r != nil {
		if r.Replicas == 0 && s.chosen == nil {
			s.recheckIfDue()
		}
		return *r, nil
	}
	s.acks.detecting.Lock()
	defer s.acks.detecting.Unlock()
	if r := s.acks.current.Load(); r != nil {
		return *r, nil
	}
	r, err := detectReplication(ctx, s.client)
	if err != nil {
		return Replication{}, fmt.Errorf("asking the server for its replicas: %w", err)
	}
	s.settle(r)
	return r, nil
}

// Replication reports the replica acknowledgement in force; before the
// store's first write or Ping, a store without a chosen one reports no
// replicas and says that it has not asked yet.
func (s *Store) Replication() Replication {
	if r := s.acks.current.Load(); r != nil {
		return *r
	}
	return Replication{Reason: "not asked yet: the store asks the server at its first write or Ping"}
}

// settle puts r in force and logs it.
func (s *Store) settle(r Replication) {
	s.acks.rechecked.Store(time.Now().UnixNano())
	s.acks.current.Store(&r)
	s.logger.Info("redisstore: replica acknowledgements", "replicas", r.Replicas, "timeout", r.Timeout, "reason", r.Reason)
}

// recheckIfDue asks the server again in the background, at most once per
// recheckEvery, and puts replicas it finds in force.
func (s *Store) recheckIfDue() {
	if time.Since(time.Unix(0, s.acks.rechecked.Load())) < recheckEvery || !s.acks.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.acks.checking.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), recheckWithin)
		defer cancel()
		r, err := detectReplication(ctx, s.client)
		if err == nil && r.Replicas > 0 {
			s.settle(r)
			return
		}
		s.acks.rechecked.Store(time.Now().UnixNano())
	}()
}

// detectReplication asks client's servers whether they have replicas: a
// primary's INFO replication (the master a Sentinel client found), or
// each Cluster master's. Where replicas are found, writes wait for one, up
// to defaultAckTimeout. A server that refuses the question (an ACL
// without INFO) gets no acknowledgement, and a warning saying how to
// choose.
func detectReplication(ctx context.Context, client redis.UniversalClient) (Replication, error) {
	var found int
	var where string
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		found, where, err = clusterReplicas(ctx, c)
	case *redis.Client:
		found, where, err = primaryReplicas(ctx, c)
	default:
		return Replication{Reason: fmt.Sprintf("a %T cannot send WAIT to the server that wrote; choose WithReplicaAcks on a *redis.Client or *redis.ClusterClient", client)}, nil
	}
	var refused redis.Error
	if errors.As(err, &refused) {
		return Replication{Reason: fmt.Sprintf("the server refused to say whether it has replicas (%v); choose WithReplicaAcks or WithoutReplicaAcks", err)}, nil
	}
	if err != nil {
		return Replication{}, err
	}
	if found == 0 {
		return Replication{Reason: "found no replica on " + where + ", so no failover can promote one that lacks a write"}, nil
	}
	return Replication{Replicas: 1, Timeout: defaultAckTimeout(client), Reason: "found " + strconv.Itoa(found) + " replica(s) on " + where}, nil
}

// connectedReplicas reads connected_slaves in INFO replication.
var connectedReplicas = regexp.MustCompile(`(?m)^connected_slaves:(\d+)`)

// primaryReplicas returns how many replicas c's server reports connected.
func primaryReplicas(ctx context.Context, c *redis.Client) (int, string, error) {
	where := "the primary"
	if c.Options().Addr == "FailoverClient" { // how go-redis names a Sentinel client's address
		where = "the master the Sentinels name"
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, where, err
	}
	m := connectedReplicas.FindStringSubmatch(info)
	if m == nil {
		return 0, where, nil
	}
	n, _ := strconv.Atoi(m[1])
	return n, where, nil
}

// clusterReplicas returns how many replicas the Cluster's masters report
// connected, each asked as primaryReplicas asks one, and names the shards
// that have none.
func clusterReplicas(ctx context.Context, c *redis.ClusterClient) (int, string, error) {
	var mu sync.Mutex // ForEachMaster asks the masters at once
	found, shards, bare := 0, 0, 0
	err := c.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		n, _, err := primaryReplicas(ctx, master)
		mu.Lock()
		defer mu.Unlock()
		found, shards = found+n, shards+1
		if n == 0 {
			bare++
		}
		return err
	})
	if err != nil {
		return 0, "the Cluster", err
	}
	where := fmt.Sprintf("the Cluster's %d shard(s)", shards)
	if found > 0 && bare > 0 {
		// One replica anywhere means failovers are expected: a shard without
		// one refuses new keys until it has one, rather than lose them.
		where += fmt.Sprintf(" (%d without a replica, whose new keys are refused until they have one)", bare)
	}
	return found, where, nil
}

// defaultAckTimeout is four fifths of client's ReadTimeout, under which
// go-redis reads WAIT's reply, leaving a fifth for the reply to arrive;
// without a ReadTimeout, defaultAckWithout.
func defaultAckTimeout(client redis.UniversalClient) time.Duration {
	if read := readTimeoutOf(client); read > 0 {
		return read * 4 / 5
	}
	return defaultAckWithout
}

// defaultAckWithout is the default timeout for a client without a
// ReadTimeout: what go-redis's default ReadTimeout gives.
const defaultAckWithout = 4 * time.Second

// readTimeoutOf returns client's ReadTimeout, 0 if it has none or is of
// another type.
func readTimeoutOf(client redis.UniversalClient) time.Duration {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	}
	return 0
}
