package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed43327c4c/idempotency"
)

// countingTransport counts the attempts the idempotency transport makes.
type countingTransport struct {
	base     http.RoundTripper
	attempts atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	return c.base.RoundTrip(r)
}

// clientPayment is what a client posting through the transport was
// finally answered.
type clientPayment struct {
	status   int
	paid     payment
	key      string
	replayed bool
	err      error
}

// TestTransportAgainstKilledWorkers: clients post 100 payments, none with
// a key of its own, through idempotency.NewTransport to the example in
// transactional mode with four workers, while workers are SIGKILLed at
// random, one every 500 ms, five times. The transport gives each payment a
// key and retries it after a kill cuts it off: every payment a client saw
// succeed is in the ledger exactly once, the one it was answered with, and
// no payment is there twice. A run killed after its first step holds its
// key until its lease (2 s) ends, and a retry then takes it over. Its base
// transport opens a connection per
// attempt: on a reused connection net/http would resend a request with an
// Idempotency-Key itself, unseen by the count of attempts.
func TestTransportAgainstKilledWorkers(t *testing.T) {
	const payments, clients, kills = 100, 10, 5
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "4", "-delay", "200ms", "-lease", "2s")

	counted := &countingTransport{base: &http.Transport{DisableKeepAlives: true}}
	client := &http.Client{Transport: idempotency.NewTransport(counted,
		idempotency.TransportMaxAttempts(20), idempotency.TransportMaxElapsed(40*time.Second),
		idempotency.TransportBackoff(50*time.Millisecond, time.Second))}
	answers := make([]clientPayment, payments)
	var posting sync.WaitGroup
	slots := make(chan struct{}, clients)
	for k := range payments {
		posting.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			answers[k] = postThroughTransport(client, p.URL, k)
		})
	}

	killed := p.killAtRandom(kills, 500*time.Millisecond)
	posting.Wait()
	t.Logf("%d payments in %d attempts, workers killed: %v", payments, counted.attempts.Load(), killed)

	keys := map[string]bool{}
	for k, a := range answers {
		ids := db.paymentsOf(t, 100+k)
		assert.LessOrEqual(t, len(ids), 1, "payment %d is in the ledger at most once", k)
		if a.err != nil || a.status != http.StatusCreated {
			t.Logf("payment %d: %d %v", k, a.status, a.err)
			continue
		}
		assert.Equal(t, []string{a.paid.ID}, ids, "payment %d: the ledger holds the payment its client was answered with", k)
		assert.Len(t, a.key, 26, "payment %d was sent under the transport's key", k)
		keys[a.key] = true
	}
	assert.Len(t, keys, payments, "every payment succeeded, each under a key of its own")
	assert.Greater(t, counted.attempts.Load(), int64(payments), "some attempt was cut off by a kill and retried")
	p.waitWorkers(4)
}

// postThroughTransport posts payment k (an amount no other posts) without
// an Idempotency-Key and returns what its client was finally answered.
func postThroughTransport(client *http.Client, baseURL string, k int) clientPayment {
	body := fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+k)
	req, err := http.NewRequest(http.MethodPost, baseURL+"/payments", strings.NewReader(body))
	if err != nil {
		return clientPayment{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	asCaller(req, testAccount)
	resp, err := client.Do(req)
	if err != nil {
		return clientPayment{err: err}
	}
	defer resp.Body.Close()
	a := clientPayment{status: resp.StatusCode, key: idempotency.SentKey(resp), replayed: idempotency.Replayed(resp)}
	raw, err := io.ReadAll(resp.Body)
	if err == nil && a.status == http.StatusCreated {
		err = json.Unmarshal(raw, &a.paid)
	}
	a.err = err
	return a
}
