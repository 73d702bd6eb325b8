package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// paymentBody is the body every request of the fault tests posts.
const paymentBody = `{"amount": 700, "currency": "EUR"}`

// postOnce posts paymentBody under key once and returns the response with
// its body read.
func postOnce(t *testing.T, baseURL, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/payments", strings.NewReader(paymentBody))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	asCaller(req, testAccount)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// post posts paymentBody under key, retrying 409s (see postUntilDone).
func post(t *testing.T, baseURL, key string) stormResponse {
	t.Helper()
	resp, _, err := postUntilDone(&http.Client{Timeout: time.Minute}, baseURL, key, paymentBody)
	require.NoError(t, err)
	return resp
}

// paymentIDs returns the ids of GET /payments, in ledger order.
func paymentIDs(t *testing.T, baseURL string) []string {
	t.Helper()
	var ids []string
	for _, p := range listPayments(t, &http.Client{Timeout: time.Minute}, baseURL) {
		ids = append(ids, p.ID)
	}
	return ids
}

// privateRedis is a redis-server that one test owns, on a free loopback
// port. It writes every change to an append-only file in a temporary
// directory, with an fsync each time, so that after Stop and Start it comes
// back with all its data: an outage, not a data loss.
type privateRedis struct {
	t      *testing.T
	bin    string
	port   string
	dir    string
	conf   string   // a config file read first, or ""
	args   []string // after the defaults
	cmd    *exec.Cmd
	exited chan struct{}
}

// startPrivateRedis starts a private redis-server with args added to its
// command line, stopped when the test ends. Like every Redis test it runs
// only when REDIS_URL is set, and then it needs redis-server on PATH.
func startPrivateRedis(t *testing.T, args ...string) *privateRedis {
	t.Helper()
	r := newPrivateRedis(t)
	r.args = args
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// startPrivateSentinel starts a private Sentinel that names primary master,
// stopped when the test ends.
func startPrivateSentinel(t *testing.T, master string, primary *privateRedis) *privateRedis {
	t.Helper()
	r := newPrivateRedis(t)
	r.conf = filepath.Join(r.dir, "sentinel.conf")
	monitor := "sentinel monitor " + master + " 127.0.0.1 " + primary.port + " 1\n"
	require.NoError(t, os.WriteFile(r.conf, []byte(monitor), 0o600))
	r.args = []string{"--sentinel"}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func newPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	if os.Getenv("REDIS_URL") == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the example against Redis")
	}
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "REDIS_URL is set, and this test also needs redis-server on PATH")
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	return &privateRedis{t: t, bin: bin, port: port, dir: t.TempDir()}
}

// URL is the server's address as -redis-url takes it.
func (r *privateRedis) URL() string { return "redis://127.0.0.1:" + r.port + "/0" }

// Start starts the server, with the data it had when it was stopped, and
// returns once it answers PING.
func (r *privateRedis) Start() {
	r.t.Helper()
	var argv []string
	if r.conf != "" {
		argv = append(argv, r.conf)
	}
	argv = append(argv, "--port", r.port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	r.cmd = exec.Command(r.bin, append(argv, r.args...)...)
	r.cmd.SysProcAttr = workerAttr() // stopped with this test binary, should it die
	require.NoError(r.t, r.cmd.Start())
	r.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(r.cmd, r.exited)

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + r.port, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		select {
		case <-r.exited:
			r.t.Fatalf("redis-server on port %s exited at start-up", r.port)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on port %s does not answer after 30s", r.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down and waits until it has exited; its port then
// refuses connections. Stopping a stopped server does nothing.
func (r *privateRedis) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.cmd = nil
}

// client returns a go-redis client of the server, closed when the test
// ends, for looking at what the example stored.
func (r *privateRedis) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + r.port})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// removeLedgerKeys deletes account's ledger keys from cfg's Redis.
func removeLedgerKeys(t *testing.T, cfg config, account string) {
	t.Helper()
	client, err := redisClient(cfg)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.Del(context.Background(), paymentsKey(account), refsKey(account)).Err())
}

// removeKeys deletes every key of client's server that starts with prefix.
func removeKeys(t *testing.T, client *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		require.NoError(t, client.Del(ctx, iter.Val()).Err())
	}
	require.NoError(t, iter.Err())
}
