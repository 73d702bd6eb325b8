package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
)

// ErrNotReplicated is wrapped by the error of a write that fewer replicas
// acknowledged than WithReplicaAcks asks for. The write reached the
// primary, which may keep it, or may lose it in a failover. A Claim that
// returns it released its claim at once (best effort), so a retry normally
// claims the key; if that release failed, a retry meets the key in flight
// (409) until the lease ends, and never runs the handler twice.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// resendPause is how long Complete waits before sending itself again
// while a primary it cannot reach is replaced.
const resendPause = 100 * time.Millisecond

// WithReplicaAcks makes every write wait for n replicas to acknowledge it,
// so that a Sentinel or Cluster failover keeps it: WAIT n timeout follows
// it on its connection to the key's primary, in one pipeline with a renew,
// complete or release, and after a claim (a second round trip) only when
// the claim took the key: a replay, a 409 or a 422 waits for no replica.
// A write fewer replicas acknowledged within timeout returns an error
// wrapping ErrNotReplicated. Claim then releases its claim (best effort)
// so the request never runs on a claim a failover could lose. Complete is
// sent again (a completion already made counts as done) until acknowledged
// or timeout has passed, so that it outlives the loss of its primary:
// timeout should cover a failover, and the middleware's lease outlast it. New panics unless the client is a
// *redis.Client or *redis.ClusterClient whose ReadTimeout exceeds timeout.
// Off by default.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	if n < 1 {
		panic("redisstore: WithReplicaAcks expects n >= 1")
	}
	if timeout <= 0 {
		panic("redisstore: WithReplicaAcks expects timeout > 0")
	}
	return func(s *Store) { s.replicas = &replicaAcks{n: n, timeout: timeout} }
}

// replicaAcks is what WithReplicaAcks set: how many replicas acknowledge
// each write, and how long a write waits for them.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// check panics unless every write through client can be followed by WAIT
// on the same server and its reply read before the client gives up.
func (r *replicaAcks) check(client redis.UniversalClient) {
	var readTimeout time.Duration
	switch c := client.(type) {
	case *redis.Client:
		readTimeout = c.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
	default:
		panic("redisstore: WithReplicaAcks expects a *redis.Client or a *redis.ClusterClient")
	}
	if readTimeout > 0 && readTimeout <= r.timeout {
		panic("redisstore: WithReplicaAcks expects a timeout below the client's ReadTimeout")
	}
}

// eval runs script on the primary of keys: as script.Run does without
// WithReplicaAcks, and with it followed by WAIT for up to its timeout in
// the same pipeline, acks then being how many replicas acknowledged.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (reply *redis.Cmd, acks int) {
	if s.replicas == nil {
		return script.Run(ctx, s.client, keys, args...), 0
	}
	return s.evalWithin(ctx, script, keys, s.replicas.timeout, args)
}

// evalWithin runs script followed by WAIT for up to wait, in one pipeline
// to the primary of keys, and on a NOSCRIPT reply once more with the
// script's source.
func (s *Store) evalWithin(ctx context.Context, script *redis.Script, keys []string, wait time.Duration, args []any) (reply *redis.Cmd, acks int) {
	primary, err := primaryOf(ctx, s.client, keys[0])
	if err != nil {
		reply = redis.NewCmd(ctx)
		reply.SetErr(err)
		return reply, 0
	}
	reply, acks = s.replicas.pipeline(ctx, primary, script.EvalSha, keys, wait, args)
	if redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") {
		reply, acks = s.replicas.pipeline(ctx, primary, script.Eval, keys, wait, args)
	}
	s.reloadIfMoved(ctx, reply.Err())
	return reply, acks
}

// reloadIfMoved makes a Cluster client ask for the slots' masters anew
// when err, from a node, says they may have moved.
func (s *Store) reloadIfMoved(ctx context.Context, err error) {
	if c, ok := s.client.(*redis.ClusterClient); ok && mastersMayHaveMoved(err) {
		c.ReloadState(ctx)
	}
}

// mastersMayHaveMoved reports whether err, from a Cluster node, means the
// client's map of masters may be out of date: the node refused a key it
// does not serve, or it did not answer at all (a master that died answers
// no MOVED, and its replica may have taken its slots over).
func mastersMayHaveMoved(err error) bool {
	return isRedirect(err) || unanswered(err)
}

// unanswered reports whether err means that no reply came: the connection
// failed or the call timed out.
func unanswered(err error) bool {
	var reply redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &reply)
}

// primaryOf returns the client of the server that holds key: a Cluster's
// master for its slot, or the one server (a Sentinel client's master) of
// any other client. A keyless WAIT sent through a ClusterClient could
// reach another node than the script, and count that node's replicas.
func primaryOf(ctx context.Context, client redis.UniversalClient, key string) (redis.Cmdable, error) {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return client, nil
}

// isRedirect reports whether err is a Cluster node's refusal of a key it
// does not serve: the script did not run there.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// pipeline sends run's script and WAIT in one pipeline and returns the
// script's reply and the number of replicas WAIT counted (0 if it failed).
func (r *replicaAcks) pipeline(ctx context.Context, primary redis.Cmdable,
	run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd,
	keys []string, wait time.Duration, args []any,
) (*redis.Cmd, int) {
	var reply, acks *redis.Cmd
	_, _ = primary.Pipelined(ctx, func(p redis.Pipeliner) error {
		reply = run(ctx, p, keys, args...)
		acks = p.Do(ctx, "wait", r.n, millis(wait)) // millis is at least 1: WAIT 0 blocks for ever
		return nil
	})
	n, _ := acks.Int()
	return reply, n
}

// acked returns nil when the store does not wait for replicas or when
// enough of them acknowledged op's write, and otherwise an error wrapping
// ErrNotReplicated.
func (s *Store) acked(op string, acks int) error {
	if s.replicas == nil || acks >= s.replicas.n {
		return nil
	}
	return fmt.Errorf("redisstore: %s: %d of %d replicas acknowledged within %v: %w",
		op, acks, s.replicas.n, s.replicas.timeout, ErrNotReplicated)
}

// claimAcked is Claim with WithReplicaAcks: the claim, and WAIT only when
// it claimed the key, run on one connection to the key's primary, since
// WAIT counts the writes of its own connection; a replay, a 409 or a 422
// so waits for no replica. A claim whose connection failed is sent once
// more on another, where its token recognises it, as go-redis would send
// it again.
func (s *Store) claimAcked(ctx context.Context, c claimRequest) (store.Record, bool, error) {
	rec, claimed, acks, err := s.claimOnConn(ctx, c)
	if unanswered(err) && ctx.Err() == nil {
		rec, claimed, acks, err = s.claimOnConn(ctx, c)
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	if claimed {
		if err := s.ackedClaim(ctx, c.keys, rec.Owner, acks); err != nil {
			return store.Record{}, false, err
		}
	}
	return rec, claimed, nil
}

// claimOnConn runs c, then WAIT if it claimed the key, on one connection
// to the key's primary, and returns how many replicas WAIT counted.
func (s *Store) claimOnConn(ctx context.Context, c claimRequest) (rec store.Record, claimed bool, acks int, err error) {
	node, err := nodeOf(ctx, s.client, c.keys[0])
	if err != nil {
		return store.Record{}, false, 0, err
	}
	conn := node.Conn()
	defer conn.Close()
	rec, claimed, err = s.claim(ctx, conn, c)
	s.reloadIfMoved(ctx, err)
	if err == nil && claimed {
		acks, _ = conn.Do(ctx, "wait", s.replicas.n, millis(s.replicas.timeout)).Int()
	}
	return rec, claimed, acks, err
}

// ackedClaim returns nil when owner's claim of keys was acknowledged, and
// otherwise releases it, best effort, within the acknowledgement timeout
// and without waiting for replicas, and returns the error: a request must
// not run on a claim that a failover may forget.
func (s *Store) ackedClaim(ctx context.Context, keys []string, owner store.Lease, acks int) error {
	err := s.acked("claim", acks)
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.replicas.timeout)
	defer cancel()
	release := releaseScript.Run(rctx, s.client, keys, owner.Token, owner.Fence).Err()
	if release != nil && !errors.Is(release, redis.Nil) {
		err = errors.Join(err, fmt.Errorf("redisstore: release of the unacknowledged claim: %w", release))
	}
	return err
}

// completeAcked is Complete with WithReplicaAcks: the completion is sent
// again, recognising one already made under owner's fencing number, until
// enough replicas acknowledged it or the timeout has passed since the
// first send. A primary that died before its replicas had the completion
// is so replaced by one that has it.
func (s *Store) completeAcked(ctx context.Context, keys []string, args []any) error {
	deadline := time.Now().Add(s.replicas.timeout)
	reply, acks := s.evalWithin(ctx, completeScript, keys, s.replicas.timeout, args)
	for {
		err := ownerErr("complete", reply.Err())
		if err == nil {
			err = s.acked("complete", acks)
		}
		left := time.Until(deadline)
		if err == nil || errors.Is(err, store.ErrNotOwner) || left <= 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(min(left, resendPause)):
		}
		reply, acks = s.evalWithin(ctx, completeScript, keys, time.Until(deadline), args)
	}
}
