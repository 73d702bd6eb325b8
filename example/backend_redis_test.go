package main

import (
	"context"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestRedisURLWithoutScheme: a -redis-url given as a bare address, as
// redis-cli takes it, is refused with the form it must have.
func TestRedisURLWithoutScheme(t *testing.T) {
	_, _, _, err := openBackend(context.Background(), config{store: "redis", redisURL: "127.0.0.1:6379"}, time.Second)
	require.ErrorContains(t, err, "-redis-url must look like redis://host:port/db")
}

// TestExampleStormRedis: four worker processes share one Redis (the test's
// own, gone when it ends); 100 keys, each posted by 20 concurrent clients,
// are charged exactly once each (see runStorm), whichever workers the
// duplicates reach.
func TestExampleStormRedis(t *testing.T) {
	rds := startPrivateRedis(t)
	p := startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-workers", "4", "-delay", "300ms")
	res := runStorm(t, p.URL, 100, 20)
	assert.Len(t, res.workers, 4, "every worker answered some of the storm: %v", res.workers)
	assert.Positive(t, res.conflicts, "no duplicate arrived while its first request was running")
	assert.Equal(t, res.replays, replaysPerWorker(t, p.URL, slices.Collect(maps.Keys(res.workers))),
		"each worker's idempotency_requests_total{idempotency_outcome=\"replayed\"} counts the replays its clients saw")
}

// TestExampleRedisSealed is issue 38's target on Redis, over the raw
// values of the store's keys (see requireSealedAtRest).
func TestExampleRedisSealed(t *testing.T) {
	rds := startPrivateRedis(t)
	requireSealedAtRest(t, func(ring string) *exampleProc {
		return startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-seal-keys", ring)
	}, func() [][]byte {
		client := rds.client()
		var values [][]byte
		iter := client.Scan(t.Context(), 0, "idempotency:*", 100).Iterator()
		for iter.Next(t.Context()) {
			value, err := client.Get(t.Context(), iter.Val()).Bytes()
			require.NoError(t, err, "the store keeps each record as a string")
			values = append(values, value)
		}
		require.NoError(t, iter.Err())
		return values
	}, func() int { return len(paymentIDs(t, startExample(t, "-store", "redis", "-redis-url", rds.URL()).URL)) })
}

// TestExampleWebhookRedeliveriesRedis: 13 deliveries of one signed event,
// 10 at once and 3 later, to four worker processes sharing one Redis: the
// event is processed once, and every delivery gets the same 200. The same
// id with another body then gets 422.
func TestExampleWebhookRedeliveriesRedis(t *testing.T) {
	rds := startPrivateRedis(t)
	p := startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-workers", "4", "-delay", "300ms",
		"-webhook-secret", testWebhookSecret)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	event, sign := stripeEvent("evt_redelivered", "invoice.paid"), signedAt(testWebhookSecret, time.Now())
	answers := make([]answer, 13)
	errs := make([]error, 13)
	storetest.Together(10, func(i int) { answers[i], errs[i] = tryDeliver(client, p.URL, event, sign) })
	for i := 10; i < 13; i++ {
		answers[i], errs[i] = tryDeliver(client, p.URL, event, sign)
	}
	workers, fresh := map[string]int{}, 0
	for i, a := range answers {
		require.NoError(t, errs[i], "delivery %d", i)
		require.Equal(t, http.StatusOK, a.status, "delivery %d: %s", i, a.body)
		require.Equal(t, answers[0].body, a.body, "delivery %d", i)
		workers[a.header.Get("X-Worker-Pid")]++
		if a.header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh, "one delivery processed the event, the others were replayed")
	assert.Contains(t, answers[0].body, `"times_processed":1`)
	assert.Greater(t, len(workers), 1, "deliveries reached several workers: %v", workers)
	assert.Equal(t, []eventCount{{ID: "evt_redelivered", Count: 1}}, listEvents(t, p.URL))
	assert.Equal(t, 1, strings.Count(p.Log(), `msg="webhook event processed"`))

	reused := deliver(t, client, p.URL, stripeEvent("evt_redelivered", "invoice.voided"), signedAt(testWebhookSecret, time.Now()))
	assert.Equal(t, http.StatusUnprocessableEntity, reused.status, reused.body)
	assert.Equal(t, []eventCount{{ID: "evt_redelivered", Count: 1}}, listEvents(t, p.URL))
	t.Logf("13 deliveries answered by workers %v", workers)
}

// TestRedisLedgerKeysExpire: a payment gives both of its account's ledger
// keys ledgerTTL.
func TestRedisLedgerKeysExpire(t *testing.T) {
	led, account, _ := ledgerUnderTest(t, "redis")
	_, err := led.Create(t.Context(), "ref-1", account, 700, "EUR")
	require.NoError(t, err)
	client := led.(*redisLedger).client
	for _, key := range []string{paymentsKey(account), refsKey(account)} {
		ttl, err := client.PTTL(t.Context(), key).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, ledgerTTL-time.Minute, key)
		assert.LessOrEqual(t, ttl, ledgerTTL, key)
	}
}

// TestRedisSentinel: with -redis-sentinel as REDIS_SENTINEL names it, the
// backend reaches the master through the Sentinel, and the ledger works.
func TestRedisSentinel(t *testing.T) {
	sentinel := os.Getenv("REDIS_SENTINEL")
	if sentinel == "" {
		t.Skip("REDIS_SENTINEL is not set; set it (e.g. idempotency@127.0.0.1:26379) to run the example through a Sentinel")
	}
	cfg, err := parseFlags([]string{"-store", "redis", "-redis-url", "", "-redis-sentinel", sentinel}, env(nil))
	require.NoError(t, err)
	account := "sk_test_" + newPaymentID()
	t.Cleanup(func() { removeLedgerKeys(t, cfg, account) })
	_, led, closeBackend, err := openBackend(t.Context(), cfg, time.Minute)
	require.NoError(t, err)
	defer closeBackend()
	p, err := led.Create(t.Context(), "ref-1", account, 700, "EUR")
	require.NoError(t, err)
	got, err := led.List(t.Context(), account)
	require.NoError(t, err)
	assert.Equal(t, []payment{p}, got)
}

// TestExampleRedisSentinelReplicaAcks: the example, given a Sentinel of the
// test's own whose master has a replica, without -redis-replica-acks (the
// store finds the replica) and with -redis-replica-acks 1, says in GET
// /healthz that writes wait for the replica, pays and replays while the
// replica is up, and the replica holds the payment by the time the client
// has its answer; with the replica down, a new key gets 503 and pays
// nothing.
func TestExampleRedisSentinelReplicaAcks(t *testing.T) {
	for _, tc := range []struct {
		name, acks string
		flags      []string
	}{
		{"detected", "writes wait up to 4s for 1 replica(s): found 1 replica(s) on the master the Sentinels name", nil},
		{"chosen", "writes wait up to 5s for 1 replica(s): chosen with WithReplicaAcks", []string{"-redis-replica-acks", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := startPrivateRedis(t)
			replica := startPrivateRedis(t, "--replicaof", "127.0.0.1", primary.port)
			sentinel := startPrivateSentinel(t, "idempotency", primary)
			require.Eventually(t, func() bool {
				info, err := primary.client().Info(t.Context(), "replication").Result()
				// A replica acknowledges writes only once its first sync is done.
				return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
			}, 30*time.Second, 50*time.Millisecond, "the replica is in sync with the primary")
			p := startExample(t, append([]string{"-store", "redis", "-redis-sentinel", "idempotency@127.0.0.1:" + sentinel.port}, tc.flags...)...)
			status, h := getHealth(t, p.URL)
			require.Equal(t, http.StatusOK, status)
			assert.Equal(t, tc.acks, h.ReplicaAcks)

			first := post(t, p.URL, "acked")
			require.Equal(t, http.StatusCreated, first.status, first.body)
			n, err := replica.client().LLen(t.Context(), paymentsKey(testAccount)).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "the replica holds the payment")
			again := post(t, p.URL, "acked")
			assert.True(t, again.replayed)
			assert.Equal(t, first.stormContent, again.stormContent)

			replica.Stop()
			resp, body := postOnce(t, p.URL, "unacked")
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
			assert.Len(t, paymentIDs(t, p.URL), 1, "the unacknowledged claim ran nothing")
		})
	}
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
// answering with the killed run's payment (found by its ledger key), and
// the others replay its response.
func TestExampleRedisWorkerKilled(t *testing.T) {
	rds := startPrivateRedis(t)
	// The lease is short so the test is quick, but not so short that a
	// renewal delayed by a loaded machine lets a retry take over from a
	// live owner.
	p := startExample(t, "-store", "redis", "-redis-url", rds.URL(), "-workers", "2",
		"-delay", "3s", "-lease", "3s")

	lost, _ := postTracked(t, p, "killed", paymentBody)
	// The handler records the payment, then sleeps for -delay: kill every
	// worker then, the one holding the key among them.
	deadline := time.Now().Add(30 * time.Second)
	var paid []string
	for paid = paymentIDs(t, p.URL); len(paid) == 0; paid = paymentIDs(t, p.URL) {
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
	assert.Equal(t, paid, paymentIDs(t, p.URL), "the killed worker's payment, which the retry found by its ledger key")
	assert.Contains(t, fresh[0].body, paid[0], "the retry answers with the killed worker's payment")

	// The one record in Redis is completed under fencing number 2: the
	// retry took the key over from the killed owner.
	ctx := context.Background()
	keys, err := rds.client().Keys(ctx, "idempotency:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one record and no lease left: %v", keys)
	rec, err := rds.client().Get(ctx, keys[0]).Result()
	require.NoError(t, err)
	fields := strings.SplitN(rec, ",", 3) // state,fence,...: see redisstore's record.go
	require.Len(t, fields, 3, rec)
	assert.Equal(t, "2", fields[0], "completed")
	assert.Equal(t, "2", fields[1], "taken over once")
}
