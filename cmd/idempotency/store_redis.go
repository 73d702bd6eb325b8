package main

import (
	"context"
	"net/url"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// openRedis reaches the Redis of cfg.url, a Cluster when the URL names
// more nodes with addr= parameters.
func openRedis(_ context.Context, cfg storeConfig) (store.Admin, func(), error) {
	client, err := redisClient(cfg.url)
	if err != nil {
		return nil, nil, err
	}
	return redisstore.New(client, redisstore.WithPrefix(cfg.prefix)), func() { _ = client.Close() }, nil
}

// redisClient returns a client of the Redis, or Cluster, that rawURL names.
func redisClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	noNotifications := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if u.Query().Has("addr") {
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled, opts.MaintNotificationsConfig = true, noNotifications
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled, opts.MaintNotificationsConfig = true, noNotifications
	return redis.NewClient(opts), nil
}
