package redisstore_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// lossyConn is a connection to the real Redis that loses the reply to the
// first script call (EVALSHA) written once armed: the call reaches the
// server and runs, then the connection drops, as a network blip or a
// proxy's idle kill would do. go-redis then sends the call again on a new
// connection, as it does by default (MaxRetries 3).
type lossyConn struct {
	net.Conn
	armed   *atomic.Bool
	dropped bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("evalsha")) && c.armed.CompareAndSwap(true, false) {
		c.dropped = true
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.dropped {
		time.Sleep(200 * time.Millisecond) // the script runs on the server meanwhile
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// lossyClient returns a client for REDIS_URL whose connections lose one
// reply after armed is set; it skips the test when REDIS_URL is unset.
func lossyClient(t *testing.T, armed *atomic.Bool) redis.UniversalClient {
	t.Helper()
	return standaloneWith(t, func(opts *redis.Options) {
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := new(net.Dialer).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: conn, armed: armed}, nil
		}
	})
}

// TestClaimSentAgainAfterALostReply: when the reply to a winning Claim is
// lost and go-redis sends the call again, the second run finds the key in
// flight under the caller's own token and reports it claimed, with the
// same fencing number: the request runs, instead of being told the key is
// in flight and leaving it locked for a whole lease with nobody running.
func TestClaimSentAgainAfterALostReply(t *testing.T) {
	armed := new(atomic.Bool)
	s, _ := newStore(t, lossyClient(t, armed))
	ctx := t.Context()
	_, _, err := s.Claim(ctx, "warm-up", "fp", "token-0", time.Minute) // loads the script
	require.NoError(t, err)

	armed.Store(true)
	rec, claimed, err := s.Claim(ctx, "pay", "fp", "token-1", time.Minute)
	require.NoError(t, err)
	require.False(t, armed.Load(), "the reply was lost")
	require.True(t, claimed, "the caller's own claim, sent again: %+v", rec)
	require.Equal(t, "token-1", rec.Owner.Token)
	require.EqualValues(t, 1, rec.Owner.Fence)
	require.NoError(t, s.Complete(ctx, "pay", rec.Owner, nil, time.Minute), "the caller holds the key")

	_, claimed, err = s.Claim(ctx, "pay", "fp", "token-2", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed, "another request's claim still finds the key taken")
}
