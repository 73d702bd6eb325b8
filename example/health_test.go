package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
)

// getHealth gets GET /healthz from baseURL, with no credentials, and
// returns its status and body.
func getHealth(t *testing.T, baseURL string) (int, health) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(baseURL + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var h health
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
	return resp.StatusCode, h
}

// TestHealthz: the example on Redis, through a proxy, answers GET /healthz
// with 200 while Redis answers, saying that writes wait for no replica (the
// Redis has none); within 3 s of the link stalling (a dead
// link: no error, no answer) with 503 and the reason; and with 200 again
// once the link flows. A stopped Redis, refusing connections, is 503 too.
func TestHealthz(t *testing.T) {
	redisServer := startPrivateRedis(t)
	proxy, err := tcpproxy.Start("127.0.0.1:" + redisServer.port)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	p := startExample(t, "-store", "redis", "-redis-url", "redis://"+proxy.Addr()+"/0")
	healthy := func() bool { status, _ := getHealth(t, p.URL); return status == http.StatusOK }
	require.True(t, healthy())
	_, h := getHealth(t, p.URL)
	require.Equal(t, "writes do not wait for replicas: found no replica on the primary, so no failover can promote one that lacks a write", h.ReplicaAcks)

	proxy.Stall()
	stalled := time.Now()
	require.Eventually(t, func() bool { return !healthy() }, 3*time.Second, 10*time.Millisecond,
		"GET /healthz still 200 3 s after the store went away")
	t.Logf("503 %v after the link stalled", time.Since(stalled))
	status, h := getHealth(t, p.URL)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, health{Status: "unavailable", Reason: "the idempotency store did not answer within 1s"}, h)

	proxy.Resume()
	require.Eventually(t, healthy, 10*time.Second, 20*time.Millisecond, "GET /healthz not 200 once the store is back")

	redisServer.Stop()
	status, h = getHealth(t, p.URL)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, health{Status: "unavailable", Reason: "the idempotency store failed"}, h)
	redisServer.Start()
	require.Eventually(t, healthy, 10*time.Second, 20*time.Millisecond, "GET /healthz not 200 once Redis runs again")
}
