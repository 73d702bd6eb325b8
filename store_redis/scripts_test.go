package redisstore_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestRoundTrips: through the middleware, with the scripts loaded on the
// server, a first request costs exactly two round trips (claim, complete),
// a replay one (claim), and a 409 for a key still in flight one (claim). A
// claim is a pipeline of PTTL and SET, a complete an EVALSHA.
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
		assert.Equal(t, []string{"pttl set", "evalsha"}, log.take(), "a first request: claim, complete")
		assert.Equal(t, http.StatusCreated, post(handler, "/payments", "first"))
		assert.Equal(t, []string{"pttl set"}, log.take(), "a replay: claim")

		done := make(chan int)
		go func() { done <- post(handler, "/slow", "slow") }()
		<-entered
		log.take()
		assert.Equal(t, http.StatusConflict, post(handler, "/slow", "slow"))
		assert.Equal(t, []string{"pttl set"}, log.take(), "a 409: claim")
		close(finish)
		assert.Equal(t, http.StatusCreated, <-done)
	})
}
