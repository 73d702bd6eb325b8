package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestAdminConformance runs the store.Admin suite against standalone
// Redis, a Redis Cluster (Find scans every master) and a Sentinel's master.
func TestAdminConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		storetest.RunAdmin(t, func(t *testing.T) store.Admin {
			s, _ := newStore(t, client)
			return s
		})
	})
}

// TestFindMatchesItsPrefixOnly: a prefix holding SCAN's glob characters
// matches itself alone, so Find never lists another prefix's records.
func TestFindMatchesItsPrefixOnly(t *testing.T) {
	client := standalone(t)
	_, base := newStore(t, client)
	globbed := redisstore.New(client, redisstore.WithPrefix(base+`*?[a]\`))
	other := redisstore.New(client, redisstore.WithPrefix(base+`x?a\`))
	for _, s := range []*redisstore.Store{globbed, other} {
		rec, _, err := s.Claim(t.Context(), "k", "fp", "token", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Complete(t.Context(), "k", rec.Owner, nil, time.Minute))
	}
	for _, s := range []*redisstore.Store{globbed, other} {
		found, err := s.Find(t.Context(), "", 10)
		require.NoError(t, err)
		require.Equal(t, []string{store.HashKey("k")}, found)
	}
}
