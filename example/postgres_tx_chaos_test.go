package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamplePostgresTxChaos: four workers in transactional mode serve 60
// keys x 5 concurrent duplicates while workers are SIGKILLed at random, one
// every 700 ms, five times; the supervisor restarts them. The clients retry
// as real clients do: after a transport error, a 500 or 503 and a 409. At
// the end the ledger holds exactly one payment per key (each key posts an
// amount of its own), each the one its clients were answered with, every
// key has one completed record, and all of a key's answers are identical.
// A run's answers may all be replays: a worker can die after its commit and
// before its response.
func TestExamplePostgresTxChaos(t *testing.T) {
	const keys, dups, kills = 60, 5, 5
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "4", "-delay", "300ms")

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	deadline := time.Now().Add(45 * time.Second)
	answers := make([][]chaosAnswer, keys)
	var clients sync.WaitGroup
	launched := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(launched)
		// The keys start 60 ms apart, so that the kills below meet
		// requests of every stage.
		for k := range keys {
			answers[k] = make([]chaosAnswer, dups)
			for d := range dups {
				clients.Go(func() {
					answers[k][d] = postUntilCreated(client, p.URL, faultKey("chaos", k), chaosBody(k), deadline)
				})
			}
			time.Sleep(60 * time.Millisecond)
		}
	}()

	var killed, before []int
	for range kills {
		time.Sleep(700 * time.Millisecond)
		pids := p.Pids()
		// Never a worker started since the previous kill, so that no
		// worker is killed right after its start.
		candidates := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool {
			return before != nil && !slices.Contains(before, pid)
		})
		victim := candidates[rand.IntN(len(candidates))]
		before = pids
		p.Kill(victim)
		killed = append(killed, victim)
	}
	<-launched
	clients.Wait()
	t.Logf("chaos: %d keys x %d duplicates in %v, workers killed: %v", keys, dups, time.Since(began).Round(time.Millisecond), killed)

	retried := map[string]int{}
	for k, got := range answers {
		fresh := 0
		for _, a := range got {
			require.NoError(t, a.err, "key %d", k)
			require.Equal(t, got[0].stormContent, a.stormContent, "key %d: the answers differ", k)
			if !a.replayed {
				fresh++
			}
			for what, n := range a.retried {
				retried[what] += n
			}
		}
		assert.LessOrEqual(t, fresh, 1, "key %d: fresh (not replayed) answers", k)
		var paid payment
		require.NoError(t, json.Unmarshal([]byte(got[0].body), &paid), "key %d", k)
		assert.Equal(t, 100+k, paid.Amount, "key %d", k)
		assert.Equal(t, []string{paid.ID}, db.paymentsOf(t, 100+k),
			"key %d: the ledger holds one payment of its amount, the one its clients were answered with", k)
	}
	assert.Equal(t, keys, db.count(t, "payments", ""), "one payment per key")
	assert.Equal(t, keys, db.count(t, "idempotency_keys", "state = 2"), "one completed record per key")
	t.Logf("chaos: retried %v", retried)
	assert.Positive(t, retried["transport error"], "no request was cut off by a kill")
	p.waitWorkers(4)
}

// paymentsOf returns the ids of the payments of amount in the ledger.
func (db *pgTestDB) paymentsOf(t *testing.T, amount int) []string {
	t.Helper()
	rows, err := db.admin.Query(context.Background(), `SELECT id FROM `+db.schema+`.payments WHERE amount = $1`, amount)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// chaosBody is key k's payment: an amount no other key posts.
func chaosBody(k int) string { return fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+k) }

// chaosAnswer is what a chaos client finally got, and what it retried on
// the way: transport errors, 500s, 503s and 409s.
type chaosAnswer struct {
	stormResponse
	retried map[string]int
	err     error
}

// postUntilCreated posts body under key until the answer is a 201,
// retrying as a real client does: a 409 after its Retry-After (see
// postUntilDone), a transport error, a 500 or a 503 after 100 ms. Any other
// answer, or still no 201 at deadline, is an error.
func postUntilCreated(client *http.Client, baseURL, key, body string, deadline time.Time) chaosAnswer {
	a := chaosAnswer{retried: map[string]int{}}
	for time.Now().Before(deadline) {
		resp, conflicts, err := postUntilDone(client, baseURL, key, body)
		a.retried["409"] += conflicts
		switch {
		case err != nil:
			a.retried["transport error"]++
		case resp.status == http.StatusCreated:
			a.stormResponse = resp
			return a
		case resp.status == http.StatusInternalServerError, resp.status == http.StatusServiceUnavailable:
			a.retried[strconv.Itoa(resp.status)]++
		default:
			a.err = fmt.Errorf("unexpected answer %d: %s", resp.status, resp.body)
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.err = fmt.Errorf("no 201 by the deadline, retried %v", a.retried)
	return a
}
