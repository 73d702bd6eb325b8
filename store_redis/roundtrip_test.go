package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// commandLog is a go-redis hook that records the name of every command
// the client sends.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, cmd := range cmds {
		l.names = append(l.names, cmd.Name())
	}
}

// take returns the names logged since the last take, and forgets them.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

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
		post := func(path, key string) int {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
			r.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			return w.Code
		}
		evalsha := func(n int) []string { return slices.Repeat([]string{"evalsha"}, n) }

		// Load the scripts: a server runs EVAL once per script it has not seen.
		require.Equal(t, http.StatusCreated, post("/payments", "warm-up"))
		log.take()

		assert.Equal(t, http.StatusCreated, post("/payments", "first"))
		assert.Equal(t, evalsha(2), log.take(), "a first request: claim, complete")
		assert.Equal(t, http.StatusCreated, post("/payments", "first"))
		assert.Equal(t, evalsha(1), log.take(), "a replay: claim")

		done := make(chan int)
		go func() { done <- post("/slow", "slow") }()
		<-entered
		log.take()
		assert.Equal(t, http.StatusConflict, post("/slow", "slow"))
		assert.Equal(t, evalsha(1), log.take(), "a 409: claim")
		close(finish)
		assert.Equal(t, http.StatusCreated, <-done)
	})
}
