package redisstore_test

import (
	"context"
	"net/http"
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

// claimDeciders make a store's claims decided by the pipeline where it
// can, or by the claim script alone.
var claimDeciders = map[string]func(*redisstore.Store) *redisstore.Store{
	"pipelined": func(s *redisstore.Store) *redisstore.Store { return s },
	"scripted":  redisstore.ScriptedClaims,
}

// TestStepsConformance runs the steps suite on every server, with claims
// decided by the pipeline where it can and by the claim script alone.
func TestStepsConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		for name, build := range claimDeciders {
			t.Run(name, func(t *testing.T) {
				storetest.RunSteps(t, func(t *testing.T) store.StepStore {
					s, _ := newStore(t, client)
					return build(s)
				})
			})
		}
	})
}

// TestStepsOfAClaimSentAgain: a claim sent again by the key's live owner
// (its reply lost) gets the steps saved meanwhile, whether the pipeline or
// the claim script decides it.
func TestStepsOfAClaimSentAgain(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		for name, build := range claimDeciders {
			t.Run(name, func(t *testing.T) {
				s, _ := newStore(t, client)
				s = build(s)
				ctx := t.Context()
				rec, _, err := s.Claim(ctx, "resent", "fp", "token", time.Minute)
				require.NoError(t, err)
				require.NoError(t, s.SaveStep(ctx, "resent", rec.Owner, store.Step{Name: "charge", Result: []byte("ch_1"), Failed: true}))
				again, claimed, err := s.Claim(ctx, "resent", "fp", "token", time.Minute)
				require.NoError(t, err)
				require.True(t, claimed)
				assert.Equal(t, []store.Step{{Name: "charge", Result: []byte("ch_1"), Failed: true}}, again.Steps)
			})
		}
	})
}

// TestStepsKeptOnTheRecord: steps live on the record's one key, which
// keeps its expiry as they are added; a watcher's mark keeps them, and a
// forced Delete of the record in flight drops them.
func TestStepsKeptOnTheRecord(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client, redisstore.WithAbandonedRetention(time.Hour))
		ctx := t.Context()
		rec, _, err := s.Claim(ctx, "stepped", "fp", "token", time.Minute)
		require.NoError(t, err)
		before := keyTTLs(t, client, prefix)
		require.NoError(t, s.SaveStep(ctx, "stepped", rec.Owner, store.Step{Name: "charge", Result: []byte("ch_1")}))
		after := keyTTLs(t, client, prefix)
		require.Len(t, after, 1, "the steps add no key: %v", after)
		key := recordKey(prefix, "stepped")
		assert.InDelta(t, before[key], after[key], float64(time.Second), "a step keeps the record's expiry")

		_, stop, err := s.Watch(ctx, "stepped")
		require.NoError(t, err)
		t.Cleanup(stop)
		inspected, found, err := s.Inspect(ctx, store.HashKey("stepped"))
		require.NoError(t, err)
		require.True(t, found)
		require.Len(t, inspected.Steps, 1, "Inspect shows the steps, kept by the watcher's mark")
		assert.Equal(t, "charge", inspected.Steps[0].Name)

		deleted, err := s.Delete(ctx, store.HashKey("stepped"), true)
		require.NoError(t, err)
		require.True(t, deleted)
		again, claimed, err := s.Claim(ctx, "stepped", "fp", "token 2", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
		assert.Empty(t, again.Steps, "a forced Delete drops the steps")
	})
}

// TestStepReplicaAcks: with replica acks a step is the script and WAIT in
// one pipeline, as a claim's acknowledgement is; on the shared Redis,
// which has no replica, SaveStep returns ErrNotReplicated, and the step
// reached the primary all the same.
func TestStepReplicaAcks(t *testing.T) {
	t.Run("replicated", func(t *testing.T) {
		client := replicatedPrimary(t)
		log := &commandLog{}
		client.AddHook(log)
		s, _ := newStore(t, client, redisstore.WithReplicaAcks(1, 2*time.Second))
		ctx := t.Context()
		rec, _, err := s.Claim(ctx, "acked", "fp", "token", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.SaveStep(ctx, "acked", rec.Owner, store.Step{Name: "warm-up"})) // loads the script
		log.take()
		require.NoError(t, s.SaveStep(ctx, "acked", rec.Owner, store.Step{Name: "charge"}))
		assert.Equal(t, []string{"evalsha wait"}, log.take(), "a step with its WAIT")
	})
	t.Run("too few", func(t *testing.T) {
		client := standalone(t)
		plain, prefix := newStore(t, client)
		acked := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, 20*time.Millisecond))
		ctx := t.Context()
		rec, _, err := plain.Claim(ctx, "unacked", "fp", "token", time.Minute)
		require.NoError(t, err)
		requireNotReplicated(t, "save step", acked.SaveStep(ctx, "unacked", rec.Owner, store.Step{Name: "charge"}))
		require.NoError(t, plain.Release(ctx, "unacked", rec.Owner))
		again, _, err := plain.Claim(ctx, "unacked", "fp", "token 2", time.Minute)
		require.NoError(t, err)
		require.Len(t, again.Steps, 1, "the step reached the primary")
	})
}

// TestStepsOfAStepHandler: through the middleware, a handler's step is
// one round trip beside the claim and the complete.
func TestStepsOfAStepHandler(t *testing.T) {
	client := standalone(t)
	log := &commandLog{}
	client.AddHook(log)
	s, _ := newStore(t, client)
	handler := stepHandler(s)
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "warm-up"))
	log.take()
	require.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
	assert.Equal(t, []string{"pttl set", "evalsha", "evalsha"}, log.take(), "claim, step, complete")
}

// stepHandler answers 201 after one step, through the middleware on s.
func stepHandler(s store.Store) http.Handler {
	return idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := idempotency.Step(r.Context(), "charge", func(context.Context) (string, error) { return "ch_1", nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
}
