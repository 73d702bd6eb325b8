package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestConcurrentCallsSharePipelines: while both lanes of claims are held,
// the claims arriving meanwhile go out in one pipeline, and each call's
// outcome is its own.
func TestConcurrentCallsSharePipelines(t *testing.T) {
	const n = 64
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		log := &commandLog{}
		client.AddHook(log)
		s, _ := newStore(t, client)
		warm, claimed, err := s.Claim(t.Context(), "warm-up", "fp", "token-warm-up", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, s.Complete(t.Context(), "warm-up", warm.Owner, nil, time.Minute)) // scripts loaded
		log.take()
		held := &heldLanes{release: make(chan struct{})}
		client.AddHook(held)
		go releaseOnceHeld(&held.held, held.release, func() int { return redisstore.ClaimsWaiting(s) })

		errs := make([]error, n)
		storetest.Together(n, func(i int) {
			key := fmt.Sprint("key-", i)
			rec, claimed, err := s.Claim(t.Context(), key, "fp", fmt.Sprint("token-", i), time.Minute)
			if err == nil && !claimed {
				err = fmt.Errorf("%s: not claimed", key)
			}
			if err == nil {
				err = s.Complete(t.Context(), key, rec.Owner, &store.Response{Status: 201, Body: []byte(key)}, time.Minute)
			}
			errs[i] = err
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		trips := log.take()
		largest := 0
		for _, names := range trips {
			largest = max(largest, strings.Count(names, "pttl"))
		}
		assert.Greater(t, largest, 1, "no round trip carried two claims: %q", trips)
		t.Logf("%d claims and completions in %d round trips", 2*n, len(trips))
		for i := range n {
			key := fmt.Sprint("key-", i)
			rec, claimed, err := s.Claim(t.Context(), key, "fp", "token-replay", time.Minute)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Equal(t, store.StateCompleted, rec.State, key)
			assert.Equal(t, key, string(rec.Response.Body), "each completion stored its own response")
		}
	})
}

// releaseOnceHeld closes release once both lanes are held (held counts the
// calls that went out alone) and at least two calls wait for them, or
// after ten seconds.
func releaseOnceHeld(held *atomic.Int64, release chan struct{}, waiting func() int) {
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		if held.Load() >= 2 && waiting() >= 2 {
			break
		}
	}
	close(release)
}

// heldLanes is a go-redis hook that holds the first two pipelines (the
// claims that found a lane free) until release is closed.
type heldLanes struct {
	release chan struct{}
	held    atomic.Int64
}

func (h *heldLanes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldLanes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *heldLanes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.held.Add(1) <= 2 {
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// TestBatchedCompletionsReloadALostScript: a pipeline of completions that
// finds the script gone (a restart, SCRIPT FLUSH) leaves each to be sent
// again alone, which loads it; every completion stands.
func TestBatchedCompletionsReloadALostScript(t *testing.T) {
	const n = 32
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	owners := make([]store.Lease, n)
	for i := range owners {
		rec, claimed, err := s.Claim(t.Context(), fmt.Sprint("key-", i), "fp", fmt.Sprint("token-", i), time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
		owners[i] = rec.Owner
	}
	lost := &lostScripts{flush: client, release: make(chan struct{})}
	client.AddHook(lost)
	go releaseOnceHeld(&lost.held, lost.release, func() int { return redisstore.CompletesWaiting(s) })
	errs := make([]error, n)
	storetest.Together(n, func(i int) {
		key := fmt.Sprint("key-", i)
		errs[i] = s.Complete(t.Context(), key, owners[i], &store.Response{Status: 201, Body: []byte(key)}, time.Minute)
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, lost.flushed.Load(), "no pipeline of completions was sent")
	for i := range n {
		key := fmt.Sprint("key-", i)
		rec, _, err := s.Claim(t.Context(), key, "fp", "token-replay", time.Minute)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, rec.State, key)
		assert.Equal(t, key, string(rec.Response.Body))
	}
}

// lostScripts is a go-redis hook that holds the first two completions
// sent alone until release is closed, and flushes the server's scripts
// before each pipeline of completions.
type lostScripts struct {
	flush   *redis.Client
	release chan struct{}
	held    atomic.Int64
	flushed atomic.Int64
}

func (l *lostScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lostScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && l.held.Add(1) <= 2 {
			<-l.release
		}
		return next(ctx, cmd)
	}
}

func (l *lostScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 1 && cmds[0].Name() == "evalsha" {
			if err := l.flush.ScriptFlush(ctx).Err(); err != nil {
				return err
			}
			l.flushed.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestClaimsOfAFailedPipelineGoToTheScript: when a shared pipeline of
// claims fails after the server ran it, each claim is decided again alone
// by the claim script, which finds its own record: every key is claimed
// once, under its own token, at fence 1.
func TestClaimsOfAFailedPipelineGoToTheScript(t *testing.T) {
	const n = 32
	client := startRedis(t, freePort(t), "").client(t)
	s, _ := newStore(t, client)
	held := &heldLanes{release: make(chan struct{})}
	broken := &brokenPipeline{}
	client.AddHook(broken)
	client.AddHook(held)
	go releaseOnceHeld(&held.held, held.release, func() int { return redisstore.ClaimsWaiting(s) })
	recs := make([]store.Record, n)
	claimed := make([]bool, n)
	errs := make([]error, n)
	storetest.Together(n, func(i int) {
		recs[i], claimed[i], errs[i] = s.Claim(t.Context(), fmt.Sprint("key-", i), "fp", fmt.Sprint("token-", i), time.Minute)
	})
	require.Positive(t, broken.failed.Load(), "no shared pipeline of claims was sent")
	for i := range n {
		require.NoError(t, errs[i])
		require.True(t, claimed[i], "key-%d", i)
		assert.Equal(t, store.Lease{Token: fmt.Sprint("token-", i), Fence: 1}, recs[i].Owner)
	}
}

// brokenPipeline is a go-redis hook that runs the first shared pipeline of
// claims, then reports every command of it failed, as a connection lost
// before the replies arrived would.
type brokenPipeline struct {
	failed atomic.Int64
}

func (b *brokenPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *brokenPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (b *brokenPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 2 && cmds[0].Name() == "pttl" && b.failed.Add(1) == 1 {
			lost := errors.New("connection lost before the replies")
			for _, cmd := range cmds {
				cmd.SetErr(lost)
			}
			return lost
		}
		return err
	}
}
