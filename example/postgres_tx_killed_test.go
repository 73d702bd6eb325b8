package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamplePostgresTxWorkerKilled: the worker running a request is
// SIGKILLed after the handler inserted the payment and before the commit
// (during -delay). The payment and the claim were one transaction, which
// the server aborts when the worker's connection drops: no payment row and
// no record are left, and the key is free at once, without waiting for a
// lease. The client's retry, sent by several clients at once, creates
// exactly one payment.
func TestExamplePostgresTxWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "2", "-delay", "2s")

	first, holder := postTracked(t, p, faultKey("killed", 0), faultBody(0))
	require.Eventually(t, func() bool { return db.paymentsInserting(t) == 1 }, 30*time.Second, 20*time.Millisecond,
		"the first request's handler inserted its payment in an open transaction")
	assert.Zero(t, db.count(t, "payments", ""), "the payment is not visible before the commit")
	assert.Zero(t, db.count(t, "idempotency_keys", ""), "nor is the claim")

	killed := holder()
	p.Kill(killed)
	require.Error(t, <-first, "the client of the killed worker gets no answer")
	require.Eventually(t, func() bool { return db.paymentsInserting(t) == 0 }, 30*time.Second, 20*time.Millisecond,
		"the server aborts the killed worker's transaction")
	assert.Zero(t, db.count(t, "payments", ""), "the killed run left no payment")
	assert.Zero(t, db.count(t, "idempotency_keys", ""), "nor a record")

	answers, _ := faultStorm(t, p.URL, "killed", 1, 10)
	requireOncePerKey(t, answers)
	assert.NotEqual(t, fmt.Sprint(killed), answers[0][0].worker)
	assert.Equal(t, 1, db.count(t, "payments", ""), "exactly one payment: the retry's")
	assert.Equal(t, 1, db.count(t, "idempotency_keys", "state = 2"))
	p.waitWorkers(2)
}

// paymentsInserting returns how many open transactions have inserted into
// (hold a row-exclusive lock on) the schema's payments table.
func (db *pgTestDB) paymentsInserting(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, db.admin.QueryRow(context.Background(), `
SELECT count(*) FROM pg_locks
WHERE relation = $1::regclass AND mode = 'RowExclusiveLock' AND granted`, db.schema+".payments").Scan(&n))
	return n
}

// postTracked sends one payment request to p in the background, on a
// connection of its own. The channel gets the request's error (nil if an
// answer came); holder tells which worker holds the connection's server end.
func postTracked(t *testing.T, p *exampleProc, key, body string) (<-chan error, func() int) {
	t.Helper()
	var mu sync.Mutex
	var clientAddr string
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				mu.Lock()
				clientAddr = conn.LocalAddr().String()
				mu.Unlock()
			}
			return conn, err
		},
	}}
	req, err := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	holder := func() int {
		mu.Lock()
		defer mu.Unlock()
		return socketOwner(t, strings.TrimPrefix(p.URL, "http://"), clientAddr, p.Pids())
	}
	return done, holder
}

// socketOwner returns which of pids holds the server end, at server, of
// the TCP connection whose client end is at client (both IPv4 host:port).
func socketOwner(t *testing.T, server, client string, pids []int) int {
	t.Helper()
	tcp, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	local, remote := procAddr(t, server), procAddr(t, client)
	inode := ""
	for _, line := range strings.Split(string(tcp), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[2] == remote {
			inode = f[9]
		}
	}
	require.NotEmpty(t, inode, "no server socket for client %s", client)
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)) // a worker may be gone
		for _, fd := range fds {
			link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if link == "socket:["+inode+"]" {
				return pid
			}
		}
	}
	t.Fatalf("no worker of %v holds the connection from %s", pids, client)
	return 0
}

// procAddr writes an IPv4 host:port as /proc/net/tcp does.
func procAddr(t *testing.T, hostport string) string {
	t.Helper()
	ap, err := netip.ParseAddrPort(hostport)
	require.NoError(t, err)
	ip := ap.Addr().As4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
}
