package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/seed43327c4c/idempotency/store"
)

// ErrNotReplicated is wrapped by the error of a write that fewer replicas
// acknowledged than WithReplicaAcks asks for; a failover may lose it. A
// Claim that returns it has released its claim (best effort).
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// resendPause is the pause between sends of an unacknowledged Complete.
const resendPause = 100 * time.Millisecond

// WithReplicaAcks makes every write wait (WAIT) up to timeout for n replicas
// to acknowledge it, so that a failover keeps it, or return an error
// wrapping ErrNotReplicated. Complete is sent again until acknowledged or
// timeout has passed: timeout should cover a failover, the lease outlast it.
// New panics unless the client is a *redis.Client or *redis.ClusterClient
// whose ReadTimeout exceeds timeout and whose maintenance notifications
// are not in go-redis's auto mode (see docs/redis.md). Off by default.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	if n < 1 {
		panic("redisstore: WithReplicaAcks expects n >= 1")
	}
	if timeout <= 0 {
		panic("redisstore: WithReplicaAcks expects timeout > 0")
	}
	return func(s *Store) { s.replicas = &replicaAcks{n: n, timeout: timeout} }
}

// replicaAcks holds WithReplicaAcks' arguments.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// check panics unless client can read WAIT's reply before it gives up.
func (r *replicaAcks) check(client redis.UniversalClient) {
	var readTimeout time.Duration
	var notifications *maintnotifications.Config
	switch c := client.(type) {
	case *redis.Client:
		readTimeout, notifications = c.Options().ReadTimeout, c.Options().MaintNotificationsConfig
	case *redis.ClusterClient:
		readTimeout, notifications = c.Options().ReadTimeout, c.Options().MaintNotificationsConfig
	default:
		panic("redisstore: WithReplicaAcks expects a *redis.Client or a *redis.ClusterClient")
	}
	if readTimeout > 0 && readTimeout <= r.timeout {
		panic("redisstore: WithReplicaAcks expects a timeout below the client's ReadTimeout")
	}
	// A claim's WAIT goes on the claim's own connection (client.Conn), and
	// go-redis's auto mode, on a server without maintenance notifications,
	// rewrites the options those connections share as each one is set up.
	if notifications == nil || notifications.Mode == maintnotifications.ModeAuto {
		panic("redisstore: WithReplicaAcks expects a client whose MaintNotificationsConfig.Mode is disabled or enabled, not auto")
	}
}

// eval runs script, with WAIT after it under WithReplicaAcks.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (reply *redis.Cmd, acks int) {
	if s.replicas == nil {
		return script.Run(ctx, s.client, keys, args...), 0
	}
	return s.evalWithin(ctx, script, keys, s.replicas.timeout, args)
}

// evalWithin runs script and WAIT for up to wait in one pipeline to the
// primary of keys, sending the source on NOSCRIPT.
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

// reloadIfMoved reloads a Cluster client's slot map if err calls for it.
func (s *Store) reloadIfMoved(ctx context.Context, err error) {
	if c, ok := s.client.(*redis.ClusterClient); ok && mastersMayHaveMoved(err) {
		c.ReloadState(ctx)
	}
}

// mastersMayHaveMoved reports whether err, from a Cluster node, means the
// slots may have new masters: a redirect, or no answer (a dead master sends
// no MOVED while its replica takes over).
func mastersMayHaveMoved(err error) bool {
	return isRedirect(err) || unanswered(err)
}

func unanswered(err error) bool {
	var reply redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &reply)
}

// primaryOf returns the client of the server that holds key, so that WAIT,
// which has no key, reaches the node that ran the script.
func primaryOf(ctx context.Context, client redis.UniversalClient, key string) (redis.Cmdable, error) {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return client, nil
}

// isRedirect reports whether err is a MOVED or ASK: the script did not run.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// pipeline sends run's script and WAIT, and returns the script's reply and
// WAIT's count (0 if it failed).
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

// acked returns an error wrapping ErrNotReplicated when fewer than the
// replicas asked for acknowledged op's write.
func (s *Store) acked(op string, acks int) error {
	if s.replicas == nil || acks >= s.replicas.n {
		return nil
	}
	return fmt.Errorf("redisstore: %s: %d of %d replicas acknowledged within %v: %w",
		op, acks, s.replicas.n, s.replicas.timeout, ErrNotReplicated)
}

// claimAcked is Claim with WithReplicaAcks. A claim whose connection failed
// is sent once more; its token recognises a first run that won.
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

// claimOnConn runs c, then WAIT if it claimed the key, on one connection,
// since WAIT counts the writes of its own connection; a claim that wrote
// nothing waits for no replica.
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

// ackedClaim releases an unacknowledged claim, best effort, and returns
// the error: no request may run on a claim a failover may forget.
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

// completeAcked is Complete with WithReplicaAcks, sent again until
// acknowledged or the timeout has passed since the first send, so that a
// primary promoted meanwhile gets the completion.
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
