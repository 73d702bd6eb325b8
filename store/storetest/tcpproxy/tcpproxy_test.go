package tcpproxy_test

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
)

// echoServer accepts connections on a free loopback port and sends back
// what each one sends, until the test ends. ended receives once for each
// connection the server has seen closed.
func echoServer(t *testing.T) (addr string, ended <-chan struct{}) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close() })
	closed := make(chan struct{}, 16)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(conn, conn)
				_ = conn.Close()
				closed <- struct{}{}
			}()
		}
	}()
	return listener.Addr().String(), closed
}

// dialThrough starts a proxy to an echo server and returns it with a
// connection made through it, both closed when the test ends, and the
// server's ended channel.
func dialThrough(t *testing.T) (*tcpproxy.Proxy, net.Conn, <-chan struct{}) {
	t.Helper()
	addr, ended := echoServer(t)
	proxy, err := tcpproxy.Start(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	conn := dial(t, proxy)
	return proxy, conn, ended
}

// dial connects to proxy; the connection is closed when the test ends.
func dial(t *testing.T, proxy *tcpproxy.Proxy) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", proxy.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// echo sends msg on conn and reads what comes back within wait.
func echo(t *testing.T, conn net.Conn, msg string, wait time.Duration) (string, error) {
	t.Helper()
	_, err := conn.Write([]byte(msg))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(conn, got)
	return string(got), err
}

// requireEnded fails the test unless the echo server sees a connection
// closed within a few seconds.
func requireEnded(t *testing.T, ended <-chan struct{}) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the server's connection is still open")
	}
}

// dialOpen is dialThrough, with one message echoed, so that the server
// has the connection.
func dialOpen(t *testing.T) (*tcpproxy.Proxy, net.Conn, <-chan struct{}) {
	t.Helper()
	proxy, conn, ended := dialThrough(t)
	_, err := echo(t, conn, "open", 5*time.Second)
	require.NoError(t, err)
	return proxy, conn, ended
}

// requireSilent sends msg on each of conns, by name, and checks that
// nothing comes back within 200 ms and the connection is not closed.
func requireSilent(t *testing.T, msg string, conns map[string]net.Conn) {
	t.Helper()
	for name, conn := range conns {
		_, err := echo(t, conn, msg, 200*time.Millisecond)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "%s connection: silent, not closed", name)
	}
}

func TestProxy(t *testing.T) {
	t.Run("forwards both ways", func(t *testing.T) {
		_, conn, _ := dialThrough(t)
		got, err := echo(t, conn, "ping", 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, "ping", got)
	})

	t.Run("a partition silences open and new connections without closing them", func(t *testing.T) {
		proxy, open, _ := dialOpen(t)
		proxy.Partition()
		later := dial(t, proxy)
		requireSilent(t, "after", map[string]net.Conn{"open": open, "new": later})
	})

	t.Run("a client's close reaches the server through a partition", func(t *testing.T) {
		proxy, conn, ended := dialOpen(t)
		proxy.Partition()
		require.NoError(t, conn.Close())
		requireEnded(t, ended)
	})

	t.Run("a stall holds what is sent, and a client's close, until Resume", func(t *testing.T) {
		proxy, open, ended := dialOpen(t)
		proxy.Stall()
		later := dial(t, proxy)
		requireSilent(t, "held", map[string]net.Conn{"open": open, "new": later})
		require.Equal(t, 2, proxy.Conns())
		require.NoError(t, later.Close())
		select {
		case <-ended:
			require.FailNow(t, "a close passed through the stall")
		case <-time.After(200 * time.Millisecond):
		}
		proxy.Resume()
		requireEnded(t, ended)
		require.NoError(t, open.SetReadDeadline(time.Now().Add(5*time.Second)))
		got := make([]byte, len("held"))
		_, err := io.ReadFull(open, got)
		require.NoError(t, err)
		require.Equal(t, "held", string(got), "what the stall held arrives after it")
		require.Equal(t, 1, proxy.Conns())
	})

	t.Run("close ends every connection and stops listening", func(t *testing.T) {
		proxy, conn, ended := dialOpen(t)
		proxy.Partition()
		require.NoError(t, proxy.Close())
		requireEnded(t, ended)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := conn.Read(make([]byte, 1))
		require.Error(t, err)
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the client's connection is closed, not silent")
		_, err = net.Dial("tcp", proxy.Addr())
		require.Error(t, err, "nothing listens after Close")
	})
}
