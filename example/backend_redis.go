package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// ledgerTTL is how long an account's ledger keys live in Redis after its
// last payment.
const ledgerTTL = 7 * 24 * time.Hour

// replicaAckTimeout is how long a write waits for the replicas that
// -redis-replica-acks asks for.
const replicaAckTimeout = 5 * time.Second

// detectReplicas is -redis-replica-acks' default: the store asks Redis
// whether it has replicas, and waits for one where it does.
const detectReplicas = -1

// paymentsKey returns the Redis list that holds account's payments, one
// JSON payment per element in the order they were made.
func paymentsKey(account string) string { return "example:payments:" + account }

// refsKey returns the Redis hash that maps each ref of account's payments
// to the payment's JSON.
func refsKey(account string) string { return "example:payment-refs:" + account }

// tallyKey returns the Redis hash that maps each id of t to its count; it
// expires ledgerTTL after the last count.
func tallyKey(t tally) string { return "example:" + t.name }

// openRedis keeps records with redisstore (under its default prefix,
// "idempotency:") and payments in a list per account (paymentsKey, beside
// refsKey, both expiring ledgerTTL after its last payment), all on the
// Redis server at cfg.redisURL, or on the master that the Sentinels
// of cfg.sentinelAddrs name cfg.sentinelMaster, so every worker shares
// them. Every write of the store and the ledger waits for the replicas
// cfg.replicaAcks gives: that many (redisstore.WithReplicaAcks,
// replicaAckTimeout), none (0), or with detectReplicas what the store
// found at start-up. It fails if the server does not answer a PING at
// start-up; later outages make the middleware answer 503 until the server
// is back.
func openRedis(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	client, err := redisClient(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	var opts []redisstore.Option
	switch {
	case cfg.replicaAcks > 0:
		opts = append(opts, redisstore.WithReplicaAcks(cfg.replicaAcks, replicaAckTimeout))
	case cfg.replicaAcks == 0:
		opts = append(opts, redisstore.WithoutReplicaAcks())
	}
	if cfg.tombstones > 0 {
		opts = append(opts, redisstore.WithTombstones(cfg.tombstones))
	}
	s := redisstore.New(client, opts...)
	if err := s.Ping(ctx); err != nil { // also settles the replicas writes wait for
		_ = client.Close()
		if cfg.sentinelMaster != "" {
			return nil, nil, nil, fmt.Errorf("-redis-sentinel: master %q of %v does not answer: %w", cfg.sentinelMaster, cfg.sentinelAddrs, err)
		}
		return nil, nil, nil, fmt.Errorf("-redis-url: %s does not answer: %w", client.Options().Addr, err)
	}
	closeClient := func() { _ = client.Close() }
	return s, &redisLedger{client: client, replication: s.Replication}, closeClient, nil
}

// redisClient returns the client of cfg's Redis: a Sentinel's failover
// client with -redis-sentinel, else the server of -redis-url. Context
// deadlines bound each call's network reads and writes, not only
// go-redis's own timeouts: the start-up check's, and the middleware's on
// lease renewals and on the calls that record an outcome
// (WithRecordTimeout).
func redisClient(cfg config) (*redis.Client, error) {
	if cfg.sentinelMaster != "" {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            cfg.sentinelMaster,
			SentinelAddrs:         cfg.sentinelAddrs,
			ContextTimeoutEnabled: true,
			ReadTimeout:           readTimeout(cfg, 0),
			PipelinePoolSize:      -1,
		}), nil
	}
	if cfg.redisURL == "" {
		return nil, errors.New("-store redis needs -redis-url, $REDIS_URL or -redis-sentinel")
	}
	opts, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis-url must look like redis://host:port/db (rediss:// for TLS): %w", err)
	}
	opts.ContextTimeoutEnabled = true
	opts.ReadTimeout = readTimeout(cfg, opts.ReadTimeout)
	opts.PipelinePoolSize = -1
	return redis.NewClient(opts), nil
}

// readTimeout returns the client's ReadTimeout: given (0 is go-redis's
// default, 5 s, of which the store's detected wait takes four fifths), or
// with a count of -redis-replica-acks one above replicaAckTimeout, since a
// write and its WAIT are one pipeline, read under ReadTimeout.
func readTimeout(cfg config, given time.Duration) time.Duration {
	if cfg.replicaAcks > 0 && given >= 0 && given <= replicaAckTimeout {
		return replicaAckTimeout + time.Second
	}
	return given
}

// recordPayment appends a payment to an account's ledger unless its ref is
// recorded, and gives both keys ledgerTTL.
// KEYS[1] the account's list (paymentsKey), KEYS[2] its refs (refsKey);
// ARGV[1] the ref, ARGV[2] the payment's JSON, ARGV[3] the TTL in ms.
// Returns the JSON of the ref's payment: ARGV[2], or the one recorded.
var recordPayment = redis.NewScript(`
local recorded = redis.call('HGET', KEYS[2], ARGV[1])
if recorded then return recorded end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return ARGV[2]`)

// redisLedger is a ledger in Redis, shared by every worker: a list and a
// hash per account. Each write waits for the replicas the store's writes
// wait for, and fewer within the store's timeout is an error (the write
// may still be on the primary: sending it again is safe).
type redisLedger struct {
	client      *redis.Client
	replication func() redisstore.Replication
}

func (l *redisLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	b, _ := json.Marshal(p) // strings and an int always encode
	keys, args := []string{paymentsKey(account), refsKey(account)}, []any{ref, b, ledgerTTL.Milliseconds()}
	recorded, err := l.runScript(ctx, recordPayment, keys, args).Text()
	if err == nil {
		err = json.Unmarshal([]byte(recorded), &p)
	}
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	return p, nil
}

// countID adds one to an id's count and gives the hash ledgerTTL.
// KEYS[1] the tally's hash (tallyKey); ARGV[1] the id, ARGV[2] the TTL in
// ms. Returns the new count.
var countID = redis.NewScript(`
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return count`)

func (l *redisLedger) Count(ctx context.Context, t tally, id string) (int, error) {
	count, err := l.runScript(ctx, countID, []string{tallyKey(t)}, []any{id, ledgerTTL.Milliseconds()}).Int()
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	return count, nil
}

func (l *redisLedger) Counts(ctx context.Context, t tally) ([]eventCount, error) {
	counts, err := l.client.HGetAll(ctx, tallyKey(t)).Result()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.name, err)
	}
	all := []eventCount{}
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		n, err := strconv.Atoi(counts[id])
		if err != nil {
			return nil, fmt.Errorf("listing %s: %s: %w", t.name, id, err)
		}
		all = append(all, eventCount{ID: id, Count: n})
	}
	return all, nil
}

// runScript runs script, loading it if the server lacks it, and fails if
// fewer replicas acknowledged its writes than the store's writes wait for.
func (l *redisLedger) runScript(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	r := l.replication()
	reply, acks := l.record(ctx, r, script.EvalSha, keys, args)
	if redis.HasErrorPrefix(reply.Err(), "NOSCRIPT") {
		reply, acks = l.record(ctx, r, script.Eval, keys, args)
	}
	if reply.Err() == nil && acks < r.Replicas {
		reply.SetErr(fmt.Errorf("%d of %d replicas acknowledged within %v", acks, r.Replicas, r.Timeout))
	}
	return reply
}

// record runs a script through run and, when r asks for replicas, WAIT in
// the same pipeline: WAIT counts the replicas that have its connection's
// writes. It returns the script's reply and how many replicas
// acknowledged.
func (l *redisLedger) record(ctx context.Context, r redisstore.Replication, run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd,
	keys []string, args []any,
) (*redis.Cmd, int) {
	var reply, waited *redis.Cmd
	_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		reply = run(ctx, pipe, keys, args...)
		if r.Replicas > 0 {
			waited = pipe.Do(ctx, "wait", r.Replicas, r.Timeout.Milliseconds())
		}
		return nil
	})
	if waited == nil {
		return reply, 0
	}
	n, _ := waited.Int()
	return reply, n
}

func (l *redisLedger) List(ctx context.Context, account string) ([]payment, error) {
	elems, err := l.client.LRange(ctx, paymentsKey(account), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("listing payments: %w", err)
	}
	payments := make([]payment, len(elems))
	for i, e := range elems {
		if err := json.Unmarshal([]byte(e), &payments[i]); err != nil {
			return nil, fmt.Errorf("listing payments: element %d: %w", i, err)
		}
	}
	return payments, nil
}
