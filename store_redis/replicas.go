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
// acknowledged than the store waits for (Replication); a failover may lose
// it. A Claim that returns it has released its claim (best effort).
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// resendPause is the pause between sends of an unacknowledged Complete.
const resendPause = 100 * time.Millisecond

// WithReplicaAcks makes every write wait (WAIT) up to timeout for n replicas
// to acknowledge it, so that a failover keeps it, or return an error
// wrapping ErrNotReplicated. Complete is sent again until acknowledged or
// timeout has passed: timeout should cover a failover, the lease outlast it.
// New panics unless the client is a *redis.Client or *redis.ClusterClient
// whose ReadTimeout exceeds timeout. Defaults to detection: see New.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	if n < 1 {
		panic("redisstore: WithReplicaAcks expects n >= 1")
	}
	if timeout <= 0 {
		panic("redisstore: WithReplicaAcks expects timeout > 0")
	}
	return func(s *Store) {
		s.chosen = &Replication{Replicas: n, Timeout: timeout, Reason: "chosen with WithReplicaAcks"}
	}
}

// checkReplicaAcks panics unless client can read the reply of a WAIT for
// up to timeout before it gives up.
func checkReplicaAcks(client redis.UniversalClient, timeout time.Duration) {
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		panic("redisstore: WithReplicaAcks expects a *redis.Client or a *redis.ClusterClient")
	}
	if read := readTimeoutOf(client); read > 0 && read <= timeout {
		panic("redisstore: WithReplicaAcks expects a timeout below the client's ReadTimeout")
	}
}

// eval runs script, with WAIT after it when r asks for replicas.
func (s *Store) eval(ctx context.Context, r Replication, script *redis.Script, keys []string, args ...any) (reply *redis.Cmd, acks int) {
	if r.Replicas == 0 {
		return script.Run(ctx, s.client, keys, args...), 0
	}
	return s.evalWithin(ctx, r, script, keys, r.Timeout, args)
}

// evalWithin runs script and WAIT for r's replicas for up to wait in one
// pipeline to the primary of keys, sending the source on NOSCRIPT.
func (s *Store) evalWithin(ctx context.Context, r Replication, script *redis.Script, keys []string, wait time.Duration, args []any) (reply *redis.Cmd, acks int) {
	primary, err := primaryOf(ctx, s.client, keys[0])
	if err != nil {
		reply = redis.NewCmd(ctx)
		reply.SetErr(err)
		return reply, 0
	}
	reply, acks = r.pipeline(ctx, primary, script.EvalSha, keys, wait, args)
	if redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") {
		reply, acks = r.pipeline(ctx, primary, script.Eval, keys, wait, args)
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
func (r Replication) pipeline(ctx context.Context, primary redis.Cmdable,
	run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd,
	keys []string, wait time.Duration, args []any,
) (*redis.Cmd, int) {
	var reply, acks *redis.Cmd
	_, _ = primary.Pipelined(ctx, func(p redis.Pipeliner) error {
		reply = run(ctx, p, keys, args...)
		acks = p.Do(ctx, "wait", r.Replicas, millis(wait)) // millis is at least 1: WAIT 0 blocks for ever
		return nil
	})
	n, _ := acks.Int()
	return reply, n
}

// acked returns an error wrapping ErrNotReplicated when fewer than the
// replicas r asks for acknowledged op's write.
func (r Replication) acked(op string, acks int) error {
	if acks >= r.Replicas {
		return nil
	}
	return fmt.Errorf("redisstore: %s: %d of %d replicas acknowledged within %v: %w",
		op, acks, r.Replicas, r.Timeout, ErrNotReplicated)
}

// claimAcked is Claim when r asks for replicas: the claim alone (never in
// a batch), then, if it took the key, the ack script, which rewrites the
// record's expiry unchanged, and WAIT in one pipeline to the key's
// primary. WAIT counts the writes of its own connection, and the ack
// script's, written after the claim, has an offset in the replication
// stream that covers the claim's, whichever connection wrote that, even a
// first send whose reply was lost. A claim
// whose connection failed is sent once more; its token recognises a first
// run that won.
func (s *Store) claimAcked(ctx context.Context, r Replication, c claimRequest) (store.Record, bool, error) {
	rec, claimed, err := s.claim(ctx, s.client, c)
	if unanswered(err) && ctx.Err() == nil {
		s.reloadIfMoved(ctx, err)
		rec, claimed, err = s.claim(ctx, s.client, c)
	}
	s.reloadIfMoved(ctx, err)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	if claimed {
		if err := s.ackClaim(ctx, r, c, rec.Owner); err != nil {
			return store.Record{}, false, err
		}
	}
	return rec, claimed, nil
}

// ackClaim waits for r's replicas to hold the claim of owner, and releases
// the claim, best effort, when they do not or the wait failed: no request
// may run on a claim a failover may forget.
func (s *Store) ackClaim(ctx context.Context, r Replication, c claimRequest, owner store.Lease) error {
	reply, acks := s.evalWithin(ctx, r, ackScript, c.keys, r.Timeout, []any{owner.Token, owner.Fence})
	err := ownerErr("claim: acknowledging", reply.Err())
	if errors.Is(err, store.ErrNotOwner) {
		return errors.New("redisstore: claim: the key was taken over before its replicas acknowledged the claim")
	}
	if err == nil {
		err = r.acked("claim", acks)
	}
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Timeout)
	defer cancel()
	release := releaseScript.Run(rctx, s.client, c.keys, owner.Token, owner.Fence).Err()
	if release != nil && !errors.Is(release, redis.Nil) {
		err = errors.Join(err, fmt.Errorf("redisstore: release of the unacknowledged claim: %w", release))
	}
	return err
}

// completeAcked is Complete when r asks for replicas, sent again until
// acknowledged or r's timeout has passed since the first send, so that a
// primary promoted meanwhile gets the completion.
func (s *Store) completeAcked(ctx context.Context, r Replication, keys []string, args []any) error {
	deadline := time.Now().Add(r.Timeout)
	reply, acks := s.evalWithin(ctx, r, completeScript, keys, r.Timeout, args)
	for {
		err := ownerErr("complete", reply.Err())
		if err == nil {
			err = r.acked("complete", acks)
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
		reply, acks = s.evalWithin(ctx, r, completeScript, keys, time.Until(deadline), args)
	}
}
