// Package redisstore keeps idempotency records in Redis, so that every
// process sharing one Redis (standalone, Sentinel or Cluster) shares one
// record per key.
//
// Each Store method is one round trip that reads and writes the key's
// record atomically: a claim is SET NX GET with PTTL in one pipeline (and
// a Lua script when that cannot decide), the others a Lua script. A record
// is one key, a string (see record.go):
//
//	<prefix>{<hash>}  state,fence,abandoned,waited,status,#fp,#token,#header;<fp><token><header><body>
//
// where <hash> is store.HashKey of the key: its SHA-256 in hex. The
// middleware's keys are binary and as long as the client's key, route and
// scope; hashed, every key name has one short length and shows nothing of
// the client's key or scope, no key can hold a brace that would end its
// tag, and no two keys collide. A done or released record's token is
// empty. Leases and retention are the key's expiry, so they run on the
// Redis server's clock: an in-flight record expires its abandoned
// retention after its lease, so the lease left is the time left minus
// that retention. The waited field marks a record a Watch waits for: its
// complete or release then publishes on the shard channel
// <prefix>{<hash>}:changed.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store on a caller's go-redis client. It is safe for
// concurrent use by many goroutines and many processes.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	abandoned time.Duration
	replicas  *replicaAcks // nil: writes do not wait for replicas
	atOnce    atomic.Bool  // Claim tries claimAtOnce first

	subscribers subscribers // of Watch
}

// Option configures a Store built by New.
type Option func(*Store)

// WithPrefix sets the text that starts every key the store writes, so that
// several applications or environments can share one Redis. It must not
// contain '{' or '}', which would break the hash tag. Defaults to
// "idempotency:".
func WithPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		panic("redisstore: WithPrefix expects a prefix without '{' or '}'")
	}
	return func(s *Store) { s.prefix = prefix }
}

// WithAbandonedRetention sets how long an in-flight record outlives its
// lease when its owner never completes it: the process died, or the owner
// released the key for a retry. Until then, the request that takes the key
// over gets a fencing number higher than the last owner's; after it, the
// key is forgotten and starts again at fencing number 1. Defaults to 24
// hours.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// New returns a store that keeps its records through client, which may be a
// *redis.Client, a Sentinel *redis.Client or a *redis.ClusterClient. New
// never dials: the first method call uses the client's pool. The client
// needs ContextTimeoutEnabled, so that the middleware's deadlines cut its
// calls on a stalled connection: New panics if a *redis.Client,
// *redis.ClusterClient or *redis.Ring has it off. The server needs a
// maxmemory-policy that never evicts these keys; see docs/redis.md.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if client == nil {
		panic("redisstore: New expects a non-nil client")
	}
	s := &Store{client: client, prefix: "idempotency:", abandoned: 24 * time.Hour}
	for _, opt := range opts {
		opt(s)
	}
	if s.replicas != nil {
		s.replicas.check(client)
	}
	if !heedsDeadlines(client) {
		panic("redisstore: New expects a client with ContextTimeoutEnabled: true, without which a stalled connection ignores the middleware's deadlines")
	}
	s.atOnce.Store(true)
	return s
}

// heedsDeadlines reports whether client cuts a call at its context's
// deadline; a client of a type New cannot look into is assumed to.
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

// keys returns the Redis key of key's record and the name of the record's
// shard channel (see Watch), which share key's hash as their hash tag.
func (s *Store) keys(key string) []string {
	record := s.prefix + "{" + store.HashKey(key) + "}"
	return []string{record, record + ":changed"}
}

// Claim implements store.Store. Its record holds lease on the Redis clock;
// an in-flight record whose owner vanished is kept for the abandoned
// retention after that, so a takeover gets a higher fencing number. A
// record in flight under token itself is reported claimed, with its
// fencing number: go-redis sends a call again when the connection fails
// after the call went out, and the claim's first run may have won.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if token == "" {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", store.ErrEmptyToken)
	}
	c := claimRequest{keys: s.keys(key), fingerprint: fingerprint, token: token,
		leaseMs: millis(lease), lifeMs: millis(s.inFlightLife(lease))}
	if s.replicas != nil {
		return s.claimAcked(ctx, c)
	}
	rec, claimed, err := s.claim(ctx, s.client, c)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: claim: %w", err)
	}
	return rec, claimed, nil
}

// decodeClaim turns claimScript's reply into what Claim returns.
func decodeClaim(r *reply, fingerprint, token string) (store.Record, bool, error) {
	if r.int(0) == 1 {
		return claimedRecord(fingerprint, token, r.int(1), time.Duration(r.int(2))*time.Millisecond), true, r.err()
	}
	state, fp, fence, ttl := store.State(r.int(1)), r.str(2), r.int(3), time.Duration(r.int(4))*time.Millisecond
	if state != store.StateCompleted { // the reply has no response
		rec, _ := foundRecord(state, fp, fence, ttl, 0, "", "")
		return rec, false, r.err()
	}
	status, err := strconv.Atoi(r.str(5))
	rec, herr := foundRecord(state, fp, fence, ttl, status, r.str(6), r.str(7))
	return rec, false, errors.Join(r.err(), err, herr)
}

// Renew implements store.Store. The lease is reset to lease from now on
// the Redis clock, and the record's expiry to its abandoned retention
// after that.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	cmd, acks := s.eval(ctx, renewScript, s.keys(key), owner.Token, owner.Fence, millis(lease))
	if err := ownerErr("renew", cmd.Err()); err != nil {
		return err
	}
	return s.acked("renew", acks)
}

// Complete implements store.Store. The record expires retention from now on
// the Redis clock.
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	state, status, header, body := store.StateUnreplayable, 0, []byte(nil), []byte(nil)
	if resp != nil {
		state, status, header, body = store.StateCompleted, resp.Status, headercodec.Encode(resp.Header), resp.Body
	}
	args := []any{owner.Token, owner.Fence, millis(retention), int(state), status, header, body}
	if s.replicas != nil {
		return s.completeAcked(ctx, s.keys(key), args)
	}
	return ownerErr("complete", completeScript.Run(ctx, s.client, s.keys(key), args...).Err())
}

// Release implements store.Store. The record is not deleted: it stays in
// flight with no token, and so no lease, for the rest of its lifetime (see
// WithAbandonedRetention), so the next claim takes it over with a higher
// fencing number than the releasing owner's.
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	cmd, acks := s.eval(ctx, releaseScript, s.keys(key), owner.Token, owner.Fence)
	if err := ownerErr("release", cmd.Err()); err != nil {
		return err
	}
	return s.acked("release", acks)
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

// reply reads a script's array reply. An element that is missing or of an
// unexpected type reads as zero and makes err report the reply as
// malformed.
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

// inFlightLife is how long an in-flight record with lease lives: the
// lease, then the abandoned retention, saturating instead of overflowing.
func (s *Store) inFlightLife(lease time.Duration) time.Duration {
	if lease > math.MaxInt64-s.abandoned {
		return math.MaxInt64
	}
	return lease + s.abandoned
}

// millis rounds d up to whole milliseconds, at least 1, as PX and PEXPIRE
// take them.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++ // rounded up without adding to d, which could overflow
	}
	return max(1, ms)
}
