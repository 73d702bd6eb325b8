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

// Watch implements store.Watcher with Redis sharded pub/sub, and so needs
// Redis 7.0 or later and a *redis.Client (standalone or Sentinel) or a
// *redis.ClusterClient; with another client it returns an error. It
// subscribes (SSUBSCRIBE) to the shard channel of key's record,
// <prefix>{<hash>}:changed, and once the server confirms the subscription
// marks the record as waited for; the complete or release of a marked
// record then publishes on that channel (SPUBLISH, from its script), which
// closes changed. The channel shares the record's hash tag, so on a
// Cluster it lives in the record's slot, on the record's master.
//
// The watches of a store share one pub/sub connection per server, opened
// by the first and closed by the last, and the watches of one key share
// one subscription. changed is closed at once when the record is not in
// flight, and also when the subscription ends before a publication (the
// connection dropped, the slot moved), since a publication may have been
// missed. The end of ctx ends the watch as stop does, without closing
// changed; stop then does nothing more.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	keys := s.keys(key)
	node, err := nodeOf(ctx, s.client, keys[1])
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
	}
	sub, t, err := s.subscribers.join(ctx, node, keys[1])
	if err != nil {
		if c, ok := s.client.(*redis.ClusterClient); ok && ctx.Err() == nil && mastersMayHaveMoved(err) {
			c.ReloadState(ctx) // a MOVED reply to SSUBSCRIBE, or a master gone
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

// nodeOf returns the client of the server that holds channel: a Cluster's
// master for its slot, or client itself when it is a *redis.Client.
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
