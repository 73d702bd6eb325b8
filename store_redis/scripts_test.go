package redisstore_test

import (
	"crypto/rand"
	_ "embed"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestRoundTrips: through the middleware, with the scripts loaded on the
// server, a first request costs exactly two commands (claim, complete), a
// replay one (claim), and a 409 for a key still in flight one (claim).
// Every command is an EVALSHA, one round trip each.
func TestRoundTrips(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		log := &commandLog{}
		client.AddHook(log)
		s, _ := newStore(t, client)
		entered, finish := make(chan struct{}), make(chan struct{})
		handler := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(entered)
				<-finish
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"pay_1"}`))
		}))
		evalsha := func(n int) []string { return slices.Repeat([]string{"evalsha"}, n) }

		// Load the scripts: a server runs EVAL once per script it has not seen.
		require.Equal(t, http.StatusCreated, post(handler, "/payments", "warm-up"))
		log.take()

		assert.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
		assert.Equal(t, evalsha(2), log.take(), "a first request: claim, complete")
		assert.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
		assert.Equal(t, evalsha(1), log.take(), "a replay: claim")

		done := make(chan int)
		go func() { done <- post(handler, "/slow", "slow") }()
		<-entered
		log.take()
		assert.Equal(t, http.StatusConflict, post(handler, "/slow", "slow"))
		assert.Equal(t, evalsha(1), log.take(), "a 409: claim")
		close(finish)
		assert.Equal(t, http.StatusCreated, <-done)
	})
}

// twoKeyClaimLua is the claim script of the two-key layout, whose lease
// lived in <record>:lease, as processes not yet upgraded run it.
//
//go:embed testdata/two_key_claim.lua
var twoKeyClaimLua string

// TestTwoKeyRecordsHonoured: records a process of the two-key layout
// wrote, a lease key beside the record, are read as it read them: a live
// lease key holds the key, a lapsed or released one lets it be taken over
// with the next fencing number, and a completed record is replayed.
func TestTwoKeyRecordsHonoured(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client)
		ctx := t.Context()
		for _, tc := range []struct {
			name      string
			fields    []any
			lease     bool
			claimed   bool
			wantFence int64
		}{
			{"live lease", []any{"state", "1", "fp", "fp", "token", "old", "fence", "4"}, true, false, 4},
			{"lapsed lease", []any{"state", "1", "fp", "fp", "token", "old", "fence", "4"}, false, true, 5},
			{"released", []any{"state", "1", "fp", "fp", "fence", "4"}, false, true, 5},
			{"completed", []any{"state", "2", "fp", "fp", "fence", "4", "status", "201", "header", "", "body", "paid"}, false, false, 4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				record := recordKey(prefix, tc.name)
				require.NoError(t, client.HSet(ctx, record, tc.fields...).Err())
				require.NoError(t, client.PExpire(ctx, record, time.Hour).Err())
				if tc.lease {
					require.NoError(t, client.Set(ctx, record+":lease", "old", time.Minute).Err())
				}
				rec, claimed, err := s.Claim(ctx, tc.name, "fp", "new", time.Minute)
				require.NoError(t, err)
				assert.Equal(t, tc.claimed, claimed, "%+v", rec)
				assert.Equal(t, tc.wantFence, rec.Owner.Fence)
				if tc.name == "completed" {
					require.NotNil(t, rec.Response)
					assert.Equal(t, "paid", string(rec.Response.Body))
				}
			})
		}
	})
}

// TestLegacyLeaseKeys: a process of the two-key layout, running its own
// claim script, takes over a live claim of the one-key store, whose lease
// it cannot see, unless the store writes lease keys too
// (WithLegacyLeaseKeys); complete and release then delete the lease key.
func TestLegacyLeaseKeys(t *testing.T) {
	twoKeyClaim := redis.NewScript(twoKeyClaimLua)
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range []struct {
			name       string
			opts       []redisstore.Option
			oldProcess int64 // what the two-key claim script replies first: 1 claimed, 0 refused
		}{
			{"one key", nil, 1},
			{"with lease keys", []redisstore.Option{redisstore.WithLegacyLeaseKeys()}, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, prefix := newStore(t, client, tc.opts...)
				ctx := t.Context()
				oldClaim := func(key string) int64 {
					record := recordKey(prefix, key)
					v, err := twoKeyClaim.Run(ctx, client, []string{record, record + ":lease"},
						"fp", "old", 60000, 120000).Slice()
					require.NoError(t, err)
					return v[0].(int64)
				}
				for _, end := range []func(key string, owner store.Lease) error{
					func(key string, owner store.Lease) error { return s.Complete(ctx, key, owner, nil, time.Hour) },
					func(key string, owner store.Lease) error { return s.Release(ctx, key, owner) },
				} {
					key := rand.Text()
					rec, claimed, err := s.Claim(ctx, key, "fp", "new", time.Minute)
					require.NoError(t, err)
					require.True(t, claimed)
					require.NoError(t, s.Renew(ctx, key, rec.Owner, time.Minute))
					if tc.oldProcess == 1 {
						assert.EqualValues(t, 1, oldClaim(key), "the old process cannot see the lease and takes the key over")
						continue
					}
					assert.EqualValues(t, 0, oldClaim(key), "the old process sees the live lease")
					require.NoError(t, end(key, rec.Owner))
					assert.Zero(t, client.Exists(ctx, recordKey(prefix, key)+":lease").Val(), "the lease key is gone")
				}
			})
		}
	})
}
