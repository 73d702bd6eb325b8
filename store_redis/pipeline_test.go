package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store_redis"
)

// tripCounter is a go-redis hook that counts the round trips in which a
// client sends scripts (EVALSHA or EVAL): scripts sent alone, and
// pipelines with the scripts in them. A new connection's handshake is
// left out.
type tripCounter struct {
	alone, pipelines, piped atomic.Int64
}

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			c.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		scripts := 0
		for _, cmd := range cmds {
			if isScript(cmd) {
				scripts++
			}
		}
		if scripts > 0 {
			c.pipelines.Add(1)
			c.piped.Add(int64(scripts))
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

// TestAutoPipelineSharesRoundTrips: 64 goroutines claiming and completing
// keys of their own at once, on each kind of server, all succeed, every
// key replays its own response, and their scripts travel in fewer
// pipelines than there are scripts.
func TestAutoPipelineSharesRoundTrips(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		const goroutines, keysEach = 64, 20
		s, _ := newStore(t, client)
		require.NoError(t, redisstore.LoadScripts(t.Context(), client))
		trips := &tripCounter{}
		client.AddHook(trips)
		ctx := t.Context()
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range keysEach {
					key := strconv.Itoa(g) + "/" + strconv.Itoa(i)
					rec, claimed, err := s.Claim(ctx, key, "fp", "owner", time.Minute)
					if !assert.NoError(t, err) || !assert.True(t, claimed, key) {
						return
					}
					resp := &store.Response{Status: 201, Body: []byte(key)}
					assert.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Minute))
				}
			})
		}
		wg.Wait()
		for g := range goroutines {
			key := strconv.Itoa(g) + "/" + strconv.Itoa(keysEach-1)
			rec, claimed, err := s.Claim(ctx, key, "fp", "another", time.Minute)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Equal(t, key, string(rec.Response.Body))
		}
		scripts := int64(2*goroutines*keysEach + goroutines)
		assert.Equal(t, scripts, trips.piped.Load(), "every script call in a pipeline")
		assert.Less(t, trips.pipelines.Load(), scripts, "pipelines shared by several calls")
		t.Logf("%d script calls in %d pipelines", scripts, trips.pipelines.Load())
	})
}

// TestAutoPipelineCallsEndAtTheirOwnDeadlines: while the server is paused,
// a call whose deadline is near returns at it, with its context's error,
// and a call that may wait longer, queued beside it, gets its reply once
// the server goes on.
func TestAutoPipelineCallsEndAtTheirOwnDeadlines(t *testing.T) {
	server := startRedis(t, freePort(t), "")
	client := redis.NewClient(&redis.Options{Addr: server.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := redisstore.New(client) // on a server of the test's own, gone when it ends
	require.NoError(t, redisstore.LoadScripts(t.Context(), client))
	claim(t, s, "warm-up")
	require.NoError(t, client.Do(t.Context(), "CLIENT", "PAUSE", 600, "ALL").Err())
	const each = 8
	var wg sync.WaitGroup
	for i := range 2 * each {
		short := i%2 == 0
		wg.Go(func() {
			within := 10 * time.Second
			if short {
				within = 50 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(t.Context(), within)
			defer cancel()
			start := time.Now()
			_, _, err := s.Claim(ctx, strconv.Itoa(i), "fp", "owner", time.Minute)
			if short {
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Less(t, time.Since(start), 400*time.Millisecond, "a short call did not wait for the server")
			} else {
				assert.NoError(t, err, "a long call got its reply after the pause")
			}
		})
	}
	wg.Wait()
}

// TestBatchContext: a pipeline is sent with the first call's values, none
// of the calls' cancellation, and the latest of their deadlines, or none
// if a call has none.
func TestBatchContext(t *testing.T) {
	type key struct{}
	first := context.WithValue(t.Context(), key{}, "first")
	soon, cancelSoon := context.WithTimeout(first, time.Minute)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(t.Context(), time.Hour)
	defer cancelLater()
	for _, tc := range []struct {
		name         string
		ctxs         []context.Context
		withDeadline bool
		deadline     context.Context
	}{
		{"one without a deadline", []context.Context{first}, false, nil},
		{"one with", []context.Context{soon}, true, soon},
		{"the latest of two", []context.Context{soon, later}, true, later},
		{"one has none", []context.Context{soon, first, later}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := redisstore.BatchContext(tc.ctxs...)
			defer cancel()
			assert.Equal(t, "first", ctx.Value(key{}), "the first call's values")
			got, ok := ctx.Deadline()
			require.Equal(t, tc.withDeadline, ok)
			if ok {
				want, _ := tc.deadline.Deadline()
				assert.Equal(t, want, got)
			}
		})
	}
	ctx, cancel := redisstore.BatchContext(soon, later)
	defer cancel()
	cancelSoon()
	cancelLater()
	assert.NoError(t, ctx.Err(), "no call's cancellation ends the pipeline")
}

// TestAutoPipelineSendsNoEndedCall: a call whose context has ended is
// answered with its error and never sent; a call made after it is.
func TestAutoPipelineSendsNoEndedCall(t *testing.T) {
	client := standalone(t)
	s, _ := newStore(t, client)
	trips := &tripCounter{}
	client.AddHook(trips)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for range 20 {
		_, _, err := s.Claim(ended, "k", "fp", "owner", time.Minute)
		require.ErrorIs(t, err, context.Canceled)
	}
	claim(t, s, "live")
	time.Sleep(50 * time.Millisecond) // for any sender still at work
	require.EqualValues(t, 1, trips.piped.Load()+trips.alone.Load(), "scripts sent")
}

// TestAutoPipelineLoadsScriptsAgain: on a server that has forgotten the
// scripts (SCRIPT FLUSH), concurrent calls in shared pipelines all
// succeed: the calls answered NOSCRIPT are sent again with the scripts'
// source.
func TestAutoPipelineLoadsScriptsAgain(t *testing.T) {
	client := startRedis(t, freePort(t), "").client(t)
	s := redisstore.New(client) // on a server of the test's own, gone when it ends
	for round := range 3 {
		require.NoError(t, client.ScriptFlush(t.Context()).Err())
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				key := strconv.Itoa(round) + "/" + strconv.Itoa(i)
				rec, claimed, err := s.Claim(t.Context(), key, "fp", "owner", time.Minute)
				if assert.NoError(t, err) && assert.True(t, claimed) {
					assert.NoError(t, s.Complete(t.Context(), key, rec.Owner, nil, time.Minute))
				}
			})
		}
		wg.Wait()
	}
}

// TestWithoutAutoPipelining: each call is a command of its own, never in a
// pipeline.
func TestWithoutAutoPipelining(t *testing.T) {
	client := standalone(t)
	s, _ := newStore(t, client, redisstore.WithoutAutoPipelining())
	require.NoError(t, redisstore.LoadScripts(t.Context(), client))
	trips := &tripCounter{}
	client.AddHook(trips)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			_, claimed, err := s.Claim(t.Context(), strconv.Itoa(i), "fp", "owner", time.Minute)
			assert.NoError(t, err)
			assert.True(t, claimed)
		})
	}
	wg.Wait()
	require.Zero(t, trips.pipelines.Load())
	require.EqualValues(t, 16, trips.alone.Load())
}
