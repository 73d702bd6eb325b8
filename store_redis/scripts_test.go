package redisstore_test

import (
	"crypto/rand"
	_ "embed"
	"net/http"
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
// server, a first request costs exactly two round trips (claim, complete),
// a replay one (claim), and a 409 for a key still in flight one (claim). A
// claim is a pipeline of SET and PTTL, a complete an EVALSHA.
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

		// Load the scripts: a server runs EVAL once per script it has not seen.
		require.Equal(t, http.StatusCreated, post(handler, "/payments", "warm-up"))
		log.take()

		assert.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
		assert.Equal(t, []string{"set pttl", "evalsha"}, log.take(), "a first request: claim, complete")
		assert.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
		assert.Equal(t, []string{"set pttl"}, log.take(), "a replay: claim")

		done := make(chan int)
		go func() { done <- post(handler, "/slow", "slow") }()
		<-entered
		log.take()
		assert.Equal(t, http.StatusConflict, post(handler, "/slow", "slow"))
		assert.Equal(t, []string{"set pttl"}, log.take(), "a 409: claim")
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
// claim script, cannot read a record of the string layout (its HMGET gets
// WRONGTYPE) and so takes nothing over; with WithLegacyLeaseKeys the store
// keeps hash records with lease keys, whose live lease the old process
// sees, and complete and release then delete the lease key.
func TestLegacyLeaseKeys(t *testing.T) {
	twoKeyClaim := redis.NewScript(twoKeyClaimLua)
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range []struct {
			name       string
			opts       []redisstore.Option
			oldProcess int64 // what the two-key claim script replies first: 0 refused, -1 WRONGTYPE
		}{
			{"string records", nil, -1},
			{"with lease keys", []redisstore.Option{redisstore.WithLegacyLeaseKeys()}, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, prefix := newStore(t, client, tc.opts...)
				ctx := t.Context()
				oldClaim := func(key string) int64 {
					record := recordKey(prefix, key)
					v, err := twoKeyClaim.Run(ctx, client, []string{record, record + ":lease"},
						"fp", "old", 60000, 120000).Slice()
					if redis.HasErrorPrefix(err, "WRONGTYPE") {
						return -1
					}
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
					if tc.oldProcess == -1 {
						assert.EqualValues(t, -1, oldClaim(key), "the old process cannot read the record and takes nothing over")
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

// TestLegacyLeaseKeysReadStringRecords: while WithLegacyLeaseKeys is being
// dropped, processes still on it and processes without it share records:
// one on the option replays a string record and takes over a lapsed one
// (which becomes a hash, with its lease key), and one without it then
// replays that hash; a takeover the other way round leaves the stale
// owner on the option refused (store.ErrNotOwner), as in one layout.
func TestLegacyLeaseKeysReadStringRecords(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		plain, prefix := newStore(t, client)
		legacy := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithLegacyLeaseKeys())
		ctx := t.Context()

		owner := claim(t, plain, "done")
		require.NoError(t, plain.Complete(ctx, "done", owner, &store.Response{Status: http.StatusCreated, Body: []byte("paid")}, time.Hour))
		rec, claimed, err := legacy.Claim(ctx, "done", "fp", "another", time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, "paid", string(rec.Response.Body), "the string record is replayed")

		stale, current := lapsedTakeover(t, plain, legacy, "lapsed")
		record := recordKey(prefix, "lapsed")
		assert.Equal(t, "hash", client.Type(ctx, record).Val(), "the string record taken over is a hash")
		assert.Equal(t, "current", client.Get(ctx, record+":lease").Val(), "the lease key is written")
		require.ErrorIs(t, plain.Complete(ctx, "lapsed", stale, nil, time.Minute), store.ErrNotOwner)
		require.NoError(t, legacy.Complete(ctx, "lapsed", current, &store.Response{Status: http.StatusCreated, Body: []byte("late")}, time.Hour))
		rec, claimed, err = plain.Claim(ctx, "lapsed", "fp", "third", time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, "late", string(rec.Response.Body), "the hash record is replayed")

		stale, _ = lapsedTakeover(t, legacy, plain, "back")
		assert.Equal(t, "string", client.Type(ctx, recordKey(prefix, "back")).Val(), "the hash record taken over is a string")
		require.ErrorIs(t, legacy.Renew(ctx, "back", stale, time.Minute), store.ErrNotOwner)
		require.ErrorIs(t, legacy.Complete(ctx, "back", stale, nil, time.Minute), store.ErrNotOwner)
		require.ErrorIs(t, legacy.Release(ctx, "back", stale), store.ErrNotOwner)
	})
}
