package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// silentServer accepts connections on a loopback port and never answers
// them, as a database host whose server hangs does.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestBackendThatNeverAnswersFailsStartUp: a Redis or Postgres server that
// accepts connections and never replies makes start-up fail after the
// timeout, naming the backend, instead of waiting forever.
func TestBackendThatNeverAnswersFailsStartUp(t *testing.T) {
	addr := silentServer(t)
	for _, cfg := range []config{
		{store: "postgres", databaseURL: "postgres://postgres@" + addr + "/test?sslmode=disable", postgresTx: true},
		{store: "redis", redisURL: "redis://" + addr + "/0"},
	} {
		t.Run(cfg.store, func(t *testing.T) {
			started := time.Now()
			_, _, _, err := openBackend(context.Background(), cfg, 300*time.Millisecond)
			require.ErrorContains(t, err, "the "+cfg.store+" backend did not answer within 300ms")
			require.Less(t, time.Since(started), 3*time.Second, "%s: start-up gave up long after its timeout", cfg.store)
		})
	}
}
