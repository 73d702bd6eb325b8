package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Watcher = (*Store)(nil)

// Watch implements store.Watcher with sharded pub/sub, so it needs Redis 7.0
// or later and a *redis.Client or *redis.ClusterClient (else it fails). It
// subscribes to the record's shard channel, then marks the record waited
// for, so its complete or release publishes there. changed also closes at
// once when the record is not in flight, and when the subscription ends
// first (a publication may have been missed). The end of ctx ends the watch
// as stop does, without closing changed.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	keys := s.keys(key)
	node, err := nodeOf(ctx, s.client, keys[1])
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
	}
	sub, t, err := s.subscribers.join(ctx, node, keys[1])
	if err != nil {
		if c, ok := s.client.(*redis.ClusterClient); ok && ctx.Err() == nil && mastersMayHaveMoved(err) {
			c.ReloadState(ctx)
		}
		return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
	}
	leave := sync.OnceFunc(func() { sub.leave(t) })
	marked, err := watchScript.Run(ctx, s.client, keys).Int()
	if err != nil {
		leave()
		return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
	}
	if marked != 1 {
		leave()
		changed := make(chan struct{})
		close(changed)
		return changed, func() {}, nil
	}
	unwatch := context.AfterFunc(ctx, leave)
	return t.changed, func() {
		unwatch()
		leave()
	}, nil
}

// nodeOf returns the *redis.Client of the server that holds channel.
func nodeOf(ctx context.Context, client redis.UniversalClient, channel string) (*redis.Client, error) {
	primary, err := primaryOf(ctx, client, channel)
	if err != nil {
		return nil, err
	}
	node, ok := primary.(*redis.Client)
	if !ok {
		return nil, errors.New("sharded pub/sub needs a *redis.Client or a *redis.ClusterClient")
	}
	return node, nil
}
