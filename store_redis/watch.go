package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Watcher = (*Store)(nil)

// subscribeWithin bounds how long Watch waits for the server to confirm
// its subscription, as go-redis's default ReadTimeout bounds a reply: a
// server that does not answer makes Watch fail, and its caller polls,
// instead of leaving the caller stuck in Watch.
const subscribeWithin = 3 * time.Second

// Watch implements store.Watcher with Redis sharded pub/sub, and so needs
// Redis 7.0 or later. It subscribes (SSUBSCRIBE) to the shard channel of
// key's record, <prefix>{<hash>}:changed, on a connection of its own, and
// once the server confirms the subscription marks the record as waited
// for; the complete or release of a marked record then publishes on that
// channel (SPUBLISH, from the script, on the record's own server), which
// closes changed. The channel shares the record's hash tag, so on a
// Cluster it lives in the record's slot and its master.
//
// changed is closed at once when the record is not in flight, and also
// when the subscription ends before a publication (the connection
// dropped, the slot moved to another master), since a publication may
// have been missed. It is not closed once ctx ends; the watch then frees
// its connection itself, and stop only waits for that.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	keys := s.keys(key)
	sub := s.client.SSubscribe(ctx, keys[2])
	var ended atomic.Bool
	end := func() {
		ended.Store(true)
		_ = sub.Close()
	}
	unwatch := context.AfterFunc(ctx, end)
	marked, err := s.subscribeAndMark(ctx, sub, keys)
	changed := make(chan struct{})
	if err != nil || !marked {
		unwatch()
		end()
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: watch: %w", err)
		}
		close(changed)
		return changed, func() {}, nil
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		// After the confirmation, whatever the subscription receives ends
		// the wait: the publication, the server's SUNSUBSCRIBE when the
		// slot moves, or the error of a dropped connection.
		_, _ = sub.Receive(context.WithoutCancel(ctx))
		if !ended.Load() {
			close(changed)
		}
	}()
	stop := func() {
		unwatch()
		end()
		<-exited
	}
	return changed, stop, nil
}

// subscribeAndMark waits for the server to confirm sub's subscription to
// keys' channel, then runs watchScript, and reports whether it marked the
// record. Marking after the confirmation leaves no moment in which a
// completion could publish unheard.
func (s *Store) subscribeAndMark(ctx context.Context, sub *redis.PubSub, keys []string) (bool, error) {
	reply, err := sub.ReceiveTimeout(ctx, subscribeWithin)
	if err != nil {
		return false, err
	}
	confirmed, ok := reply.(*redis.Subscription)
	if !ok || confirmed.Kind != "ssubscribe" || confirmed.Channel != keys[2] {
		return false, fmt.Errorf("unexpected reply %v to SSUBSCRIBE %s", reply, keys[2])
	}
	marked, err := watchScript.Run(ctx, s.client, keys).Int()
	return marked == 1, err
}
