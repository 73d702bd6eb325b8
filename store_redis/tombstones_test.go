package redisstore_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestTombstonesConformance runs the tombstones suite on every server.
func TestTombstonesConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		storetest.RunTombstones(t, func(t *testing.T) store.Store {
			s, _ := newStore(t, client, redisstore.WithTombstones(storetest.TombstoneTime))
			return s
		})
	})
}

// TestTombstoneRoundTrips: with tombstones, through the middleware, a
// first request is still two round trips, the claim script and the
// complete script, and a replay one, the claim script.
func TestTombstoneRoundTrips(t *testing.T) {
	client := standalone(t)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(t, client, redisstore.WithTombstones(time.Hour))
	handler := idempotency.New(idempotency.WithStore(s))(replayedPayment)
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "warm-up")) // loads the scripts
	log.take()
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.take(), "claim, complete")
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
	assert.Equal(t, []string{"evalsha"}, log.take(), "a replay: claim")
}

// TestTombstoneAdmin: Inspect reports a tombstone as StateExpired with its
// completion time, Find lists its hash once, before and after its record
// ends, and Delete removes it, so that the key can be claimed again.
func TestTombstoneAdmin(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, _ := newStore(t, client, redisstore.WithTombstones(time.Hour))
		ctx := t.Context()
		hash := store.HashKey("late")
		rec, _, err := s.Claim(ctx, "late", "fp", "token", time.Minute)
		require.NoError(t, err)
		before := time.Now()
		require.NoError(t, s.Complete(ctx, "late", rec.Owner, nil, 100*time.Millisecond))
		found, err := s.Find(ctx, hash[:8], 10)
		require.NoError(t, err)
		assert.Equal(t, []string{hash}, found, "the done record, listed once")
		time.Sleep(200 * time.Millisecond)

		tomb, ok, err := s.Inspect(ctx, hash)
		require.NoError(t, err)
		require.True(t, ok, "the tombstone is found")
		assert.Equal(t, store.StateExpired, tomb.State)
		assert.Equal(t, "fp", tomb.Fingerprint)
		assert.WithinRange(t, tomb.Completed, before.Add(-time.Second), time.Now().Add(time.Second))
		found, err = s.Find(ctx, hash[:8], 10)
		require.NoError(t, err)
		assert.Equal(t, []string{hash}, found, "the tombstone, listed")

		deleted, err := s.Delete(ctx, hash, false)
		require.NoError(t, err)
		require.True(t, deleted, "Delete removes a tombstone")
		_, claimed, err := s.Claim(ctx, "late", "fp", "token 2", time.Minute)
		require.NoError(t, err)
		assert.True(t, claimed, "the key is free once its tombstone is deleted")
	})
}

// BenchmarkTombstoneBytes reports what MEMORY USAGE counts for one
// tombstone, and for its record beside it with a small response, under
// the default prefix and the default fingerprint's 16 bytes. Its keys are
// its own (a random part in each) and deleted at the end.
func BenchmarkTombstoneBytes(b *testing.B) {
	client := standalone(b)
	s := redisstore.New(client, redisstore.WithLogger(slog.New(slog.DiscardHandler)), redisstore.WithTombstones(time.Hour))
	ctx := b.Context()
	const prefix = "idempotency:"
	fp, run := "0123456789abcdef", rand.Text()
	var written []string
	b.Cleanup(func() { client.Del(context.Background(), written...) })
	var tomb, record int64
	i := 0
	for b.Loop() {
		key := "tombstone-bytes-" + run + strconv.Itoa(i)
		rec, _, err := s.Claim(ctx, key, fp, "token", time.Minute)
		require.NoError(b, err)
		resp := &store.Response{Status: http.StatusCreated, Body: []byte(`{"id":"pay_1","amount":1250}`)}
		require.NoError(b, s.Complete(ctx, key, rec.Owner, resp, time.Hour))
		written = append(written, recordKey(prefix, key), recordKey(prefix, key)+":tomb")
		record = client.MemoryUsage(ctx, recordKey(prefix, key), 0).Val()
		tomb = client.MemoryUsage(ctx, recordKey(prefix, key)+":tomb", 0).Val()
		i++
	}
	b.ReportMetric(float64(tomb), "bytes/tombstone")
	b.ReportMetric(float64(record), "bytes/record")
}
