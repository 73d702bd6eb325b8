package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// paymentsKey returns the Redis list that holds account's payments, one
// JSON payment per element in the order they were made. It never expires.
func paymentsKey(account string) string { return "example:payments:" + account }

// openRedis keeps records with redisstore (under its default prefix,
// "idempotency:") and payments in a list per account (paymentsKey), both on the Redis
// server at cfg.redisURL, so every worker shares them. It fails if the
// server does not answer a PING at start-up; later outages make the
// middleware answer 503 until the server is back.
func openRedis(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	if cfg.redisURL == "" {
		return nil, nil, nil, errors.New("-store redis needs -redis-url or $REDIS_URL")
	}
	opts, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-redis-url must look like redis://host:port/db (rediss:// for TLS): %w", err)
	}
	// Let context deadlines bound each call's network reads and writes,
	// not only go-redis's own timeouts: the start-up check's, and the
	// middleware's on lease renewals and on the calls that record an
	// outcome (WithRecordTimeout).
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, nil, fmt.Errorf("-redis-url: %s does not answer: %w", opts.Addr, err)
	}
	closeClient := func() { _ = client.Close() }
	return redisstore.New(client), &redisLedger{client: client}, closeClient, nil
}

// redisLedger is a ledger in a Redis list, shared by every worker.
type redisLedger struct {
	client *redis.Client
}

func (l *redisLedger) Create(ctx context.Context, account string, amount int, currency string) (payment, error) {
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	b, _ := json.Marshal(p) // strings and an int always encode
	if err := l.client.RPush(ctx, paymentsKey(account), b).Err(); err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	return p, nil
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
