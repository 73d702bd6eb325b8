package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// TestExampleRedisOutage: while Redis is down, protected requests get 503
// problems (fail closed) and the payment handler does not run; when Redis
// is back with its data, a key completed before the outage is replayed,
// not charged again, and a key refused during it is charged exactly once.
func TestExampleRedisOutage(t *testing.T) {
	rds := startPrivateRedis(t)
	p := startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-workers", "2")

	before := post(t, p.URL, "before-outage")
	require.Equal(t, http.StatusCreated, before.status, before.body)
	require.False(t, before.replayed)

	rds.Stop()
	for range 2 {
		for _, key := range []string{"before-outage", "during-outage"} {
			resp, body := postOnce(t, p.URL, key)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "key %s while Redis is down: %s", key, body)
			assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
			assert.NotContains(t, body, "127.0.0.1", "a 503 tells nothing of the store")
		}
	}

	rds.Start()
	// Each worker's pool redials on its own; until it has, requests still
	// get 503 and run nothing.
	deadline := time.Now().Add(30 * time.Second)
	var replay stormResponse
	for replay = post(t, p.URL, "before-outage"); replay.status == http.StatusServiceUnavailable; replay = post(t, p.URL, "before-outage") {
		require.True(t, time.Now().Before(deadline), "still 503 30s after Redis came back")
		time.Sleep(100 * time.Millisecond)
	}
	assert.True(t, replay.replayed, "a key completed before the outage is replayed after it")
	assert.Equal(t, before.stormContent, replay.stormContent)

	during := post(t, p.URL, "during-outage")
	require.Equal(t, http.StatusCreated, during.status, during.body)
	assert.False(t, during.replayed, "a key refused with 503 never ran, so its retry runs")
	again := post(t, p.URL, "during-outage")
	assert.True(t, again.replayed)
	assert.Equal(t, during.stormContent, again.stormContent)

	assert.Len(t, paymentIDs(t, p.URL), 2, "one payment per key: none during the outage, none again after it")
}

// TestExampleRedisWorkerKilled: a worker SIGKILLed while its handler holds
// a key (the payment is recorded, the response not yet sent) leaves the
// key in flight until its lease lapses. Then, of 20 concurrent retries,
// exactly one takes the key over and runs, under the next fencing number,
// and the others replay its response.
func TestExampleRedisWorkerKilled(t *testing.T) {
	rds := startPrivateRedis(t)
	// The lease is short so the test is quick, but not so short that a
	// renewal delayed by a loaded machine lets a retry take over from a
	// live owner.
	p := startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-workers", "2",
		"-delay", "3s", "-lease", "3s")

	lost := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(paymentBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "killed")
		// A connection of its own: net/http's transport sends a request
		// that carries an Idempotency-Key again, on a new connection, when
		// a reused keep-alive connection dies before any response, and
		// that second try would reach a restarted worker.
		client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		lost <- err
	}()
	// The handler records the payment, then sleeps for -delay: kill every
	// worker then, the one holding the key among them.
	deadline := time.Now().Add(30 * time.Second)
	for len(paymentIDs(t, p.URL)) == 0 {
		require.True(t, time.Now().Before(deadline), "the first request never recorded its payment")
		time.Sleep(20 * time.Millisecond)
	}
	killed := p.Pids()
	for _, pid := range killed {
		p.Kill(pid)
	}
	require.Error(t, <-lost, "the killed worker's client gets no response")
	for slices.ContainsFunc(p.Pids(), func(pid int) bool { return slices.Contains(killed, pid) }) {
		require.True(t, time.Now().Before(deadline), "the supervisor never noticed the killed workers")
		time.Sleep(20 * time.Millisecond)
	}
	p.waitWorkers(2)

	answers := make([]stormResponse, 20)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			resp, _, err := postUntilDone(&http.Client{Timeout: time.Minute}, p.URL, "killed", paymentBody)
			assert.NoError(t, err)
			answers[i] = resp
		})
	}
	wg.Wait()
	var fresh []stormResponse
	for _, a := range answers {
		if !a.replayed {
			fresh = append(fresh, a)
		}
	}
	require.Len(t, fresh, 1, "exactly one retry runs: %+v", answers)
	require.Equal(t, http.StatusCreated, fresh[0].status, fresh[0].body)
	for _, a := range answers {
		assert.Equal(t, fresh[0].stormContent, a.stormContent, "every other retry replays the one that ran")
	}
	assert.Len(t, paymentIDs(t, p.URL), 2, "the killed worker's payment and the retry's, nothing more")

	// The one record in Redis is completed under fencing number 2: the
	// retry took the key over from the killed owner.
	ctx := context.Background()
	keys, err := rds.client().Keys(ctx, "idempotency:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one record and no lease left: %v", keys)
	rec, err := rds.client().HGetAll(ctx, keys[0]).Result()
	require.NoError(t, err)
	assert.Equal(t, "2", rec["state"], "completed")
	assert.Equal(t, "2", rec["fence"], "taken over once")
}
