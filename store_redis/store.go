// Package redisstore keeps idempotency records in Redis (standalone,
// Sentinel or Cluster), one per key shared by every process.
//
// A record is one string key, <prefix>{<hash>} with <hash> store.HashKey of
// the key (layout in record.go), so a key name has one short length, shows
// nothing of the client's key and cannot break its hash tag; its steps are
// kept in it, and a tombstone (WithTombstones) beside it. A claim is SET
// NX GET and PTTL in one pipeline, or a Lua script when that cannot decide;
// the other methods are a Lua script each. Leases and retention are the
// key's expiry, on the Redis server's clock: an in-flight record lives its
// lease plus the abandoned retention. docs/redis.md describes the layout,
// the scripts and the wake-ups.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/batch"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store on a caller's go-redis client.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	abandoned time.Duration
	tombs     time.Duration // 0: none kept
	chosen    *Replication  // by an option; nil: detected (see replication)
	acks      replication
	logger    *slog.Logger
	atOnce    atomic.Bool // Claim tries sendClaims first
	claims    *batch.Sender[*claimCall]
	completes *batch.Sender[*completeCall]

	subscribers subscribers // of Watch
}

// Option configures a Store built by New.
type Option func(*Store)

// WithPrefix sets the text that starts every key the store writes, so that
// several applications can share one Redis; it panics on '{' or '}', which
// would break the hash tag. Defaults to "idempotency:".
func WithPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		panic("redisstore: WithPrefix expects a prefix without '{' or '}'")
	}
	return func(s *Store) { s.prefix = prefix }
}

// WithAbandonedRetention sets how long an in-flight record outlives its
// lease when its owner dies or releases it. Until then a takeover gets the
// next fence; after it the key starts again at fence 1. Defaults to 24
// hours.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// New returns a store that keeps its records through client (a
// *redis.Client, Sentinel or not, or a *redis.ClusterClient); it never
// dials. Unless an option chose, its first write or Ping asks the server
// for replicas, and where it has some, writes wait for one (Replication
// reports it). New panics if a *redis.Client, *redis.ClusterClient or
// *redis.Ring has ContextTimeoutEnabled off, since deadlines must cut calls
// on a stalled connection. The server needs a maxmemory-policy that never
// evicts these keys; see docs/redis.md.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New expects a non-nil client")
	}
	s := &Store{client: client, prefix: "idempotency:", abandoned: 24 * time.Hour, logger: slog.Default()}
	for _, opt := range opts {
		opt(s)
	}
	if s.chosen != nil {
		if s.chosen.Replicas > 0 {
			checkReplicaAcks(client, s.chosen.Timeout)
		}
		s.settle(*s.chosen)
	}
	if !heedsDeadlines(client) {
		panic("redisstore: New expects a client with ContextTimeoutEnabled: true, without which a stalled connection ignores the middleware's deadlines")
	}
	s.atOnce.Store(s.tombs == 0)
	s.claims = batch.New(batchLanes, s.claimAlone, s.sendSharedClaims)
	s.completes = batch.New(batchLanes, s.completeAlone, s.sendCompletes)
	return s
}

// heedsDeadlines reports whether client cuts a call at its context's
// deadline; a client of another type is assumed to.
func heedsDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// keys returns the Redis key of key's record, its shard channel and its
// tombstone's key, which share a hash tag and so a Cluster slot.
func (s *Store) keys(key string) []string { return s.hashKeys(store.HashKey(key)) }

// hashKeys is keys for the key whose store.HashKey is hash; the record's
// key is the start of the others.
func (s *Store) hashKeys(hash string) []string {
	channel := s.prefix + "{" + hash + "}:changed"
	record := channel[:len(channel)-len(":changed")]
	return []string{record, channel, record + tombSuffix}
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if token == "" {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", store.ErrEmptyToken)
	}
	c := claimRequest{keys: s.keys(key), fingerprint: fingerprint, token: token,
		leaseMs: millis(lease), lifeMs: millis(s.inFlightLife(lease)), tombs: min(1, int(s.tombs))}
	r, err := s.replication(ctx)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	if r.Replicas > 0 {
		return s.claimAcked(ctx, r, c)
	}
	rec, claimed, err := s.claimBatched(ctx, c)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	return rec, claimed, nil
}

// claimBatched is claim through the store's batches of claims.
func (s *Store) claimBatched(ctx context.Context, c claimRequest) (store.Record, bool, error) {
	if s.atOnce.Load() {
		call := &claimCall{c: c}
		if err := s.claims.Do(ctx, call); err != nil {
			return store.Record{}, false, err
		}
		if call.err != nil || call.decided {
			return call.rec, call.claimed, call.err
		}
	}
	return s.claimByScript(ctx, s.client, c)
}

// decodeClaim turns claimScript's reply into what Claim returns.
func decodeClaim(r *reply, fingerprint, token string) (store.Record, bool, error) {
	if r.int(0) == 1 {
		rec := claimedRecord(fingerprint, token, r.int(1), time.Duration(r.int(2))*time.Millisecond)
		steps, err := decodeSteps(r.str(3))
		rec.Steps = steps
		return rec, true, errors.Join(r.err(), err)
	}
	state, fp, fence, ttl := store.State(r.int(1)), r.str(2), r.int(3), time.Duration(r.int(4))*time.Millisecond
	switch state {
	case store.StateExpired:
		rec, err := tombstone(fp, fence, ttl, r.str(6))
		return rec, false, errors.Join(r.err(), err)
	case store.StateInFlight, store.StateUnreplayable: // the reply has no response
		rec, _ := foundRecord(state, fp, fence, ttl, 0, "", "")
		return rec, false, r.err()
	}
	status, err := strconv.Atoi(r.str(5))
	rec, herr := foundRecord(state, fp, fence, ttl, status, r.str(6), r.str(7))
	return rec, false, errors.Join(r.err(), err, herr)
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	r, err := s.replication(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	cmd, acks := s.eval(ctx, r, renewScript, s.keys(key), owner.Token, owner.Fence, millis(lease))
	if err := ownerErr("renew", cmd.Err()); err != nil {
		return err
	}
	return r.acked("renew", acks)
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	state, status, header, body := store.StateUnreplayable, 0, []byte(nil), []byte(nil)
	if resp != nil {
		state, status, header, body = store.StateCompleted, resp.Status, headercodec.Encode(resp.Header), resp.Body
	}
	args := []any{owner.Token, owner.Fence, millis(retention), int(state), status, header, body, s.tombsMs()}
	r, err := s.replication(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if r.Replicas > 0 {
		return s.completeAcked(ctx, r, s.keys(key), args)
	}
	call := &completeCall{keys: s.keys(key), args: args}
	err = s.completes.Do(ctx, call)
	if err == nil {
		err = call.err
	}
	return ownerErr("complete", err)
}

// Release implements store.Store. The record stays in flight without a
// token until its abandoned retention ends, so that the next claim gets a
// higher fence.
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	r, err := s.replication(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	cmd, acks := s.eval(ctx, r, releaseScript, s.keys(key), owner.Token, owner.Fence)
	if err := ownerErr("release", cmd.Err()); err != nil {
		return err
	}
	return r.acked("release", acks)
}

// ownerErr translates the reply of an owner-guarded script: nil means the
// guard refused the caller.
func ownerErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.Nil):
		return store.ErrNotOwner
	default:
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
}

// reply reads a script's array reply; a missing or mistyped element reads
// as zero and makes err report the reply malformed.
type reply struct {
	v   []any
	bad bool
}

func (r *reply) int(i int) int64 {
	n, ok := r.at(i).(int64)
	r.bad = r.bad || !ok
	return n
}

func (r *reply) str(i int) string {
	s, ok := r.at(i).(string)
	r.bad = r.bad || !ok
	return s
}

func (r *reply) at(i int) any {
	if i < len(r.v) {
		return r.v[i]
	}
	return nil
}

func (r *reply) err() error {
	if r.bad {
		return fmt.Errorf("malformed reply %v", r.v)
	}
	return nil
}

// inFlightLife is lease plus the abandoned retention, saturating.
func (s *Store) inFlightLife(lease time.Duration) time.Duration {
	if lease > math.MaxInt64-s.abandoned {
		return math.MaxInt64
	}
	return lease + s.abandoned
}

// millis rounds d up to whole milliseconds, at least 1.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++ // rounded up without adding to d, which could overflow
	}
	return max(1, ms)
}
