package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestMetrics: GET /metrics needs no account and counts each outcome of
// the payments route, and of the receipts' jobs, labelled with this worker.
func TestMetrics(t *testing.T) {
	m, err := newMetrics()
	require.NoError(t, err)
	a := withProvider(t, &api{ledger: &memoryLedger{}, log: slog.New(slog.DiscardHandler), jobs: store.NewMemory(), jobOptions: []idempotency.DoOption{idempotency.DoObserver(m.observer)}})
	observe := idempotency.WithObserver(m.observer)
	srv := httptest.NewServer(withMetrics(m, a.routes(newMiddleware(nil, 30*time.Second, a.log, observe),
		newWebhookMiddleware(nil, 30*time.Second, a.log, observe))))
	t.Cleanup(srv.Close)

	var paid payment
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount": 100, "currency": "EUR"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "metrics-1")
		asCaller(req, testAccount)
		require.NoError(t, json.Unmarshal([]byte(do(t, req).body), &paid))
	}
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments/"+paid.ID+"/receipt", nil)
		require.NoError(t, err)
		asCaller(req, testAccount)
		require.Equal(t, http.StatusOK, do(t, req).status)
	}
	got := scrape(t, http.DefaultClient, srv.URL)
	require.Equal(t, pid, got.worker)
	require.Equal(t, map[string]int{"executed": 1, "replayed": 2}, got.requests)
	require.Equal(t, map[string]int{"executed": 1, "replayed": 2}, got.jobs)
	require.Contains(t, got.text, "idempotency_store_duration_seconds_bucket{")
	require.Contains(t, got.text, "idempotency_handler_duration_seconds_count{")
	require.Contains(t, got.text, `idempotency_job_duration_seconds_count{idempotency_outcome="executed"`)
}

// scraped is one worker's answer to GET /metrics.
type scraped struct {
	worker   string         // its worker label
	requests map[string]int // idempotency_requests_total by outcome
	jobs     map[string]int // idempotency_jobs_total by outcome
	text     string
}

// requestsLine and jobsLine are series of idempotency_requests_total and
// idempotency_jobs_total, with their labels.
var (
	requestsLine = regexp.MustCompile(`(?m)^idempotency_requests_total\{(.*)\} (\d+)$`)
	jobsLine     = regexp.MustCompile(`(?m)^idempotency_jobs_total\{(.*)\} (\d+)$`)
)

// label returns the value of label name in a series' labels.
func label(labels, name string) string {
	m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(labels)
	if m == nil {
		return ""
	}
	return m[1]
}

// scrape gets GET /metrics from baseURL and reads its requests counter.
// Every series must name the same worker.
func scrape(t testing.TB, client *http.Client, baseURL string) scraped {
	t.Helper()
	resp, err := client.Get(baseURL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, resp.Header.Get("X-Worker-Pid"), label(string(body), workerLabel), "the worker label names the worker answering")
	s := scraped{worker: resp.Header.Get("X-Worker-Pid"), text: string(body)}
	s.requests = countsByOutcome(t, requestsLine, s)
	s.jobs = countsByOutcome(t, jobsLine, s)
	return s
}

// countsByOutcome adds up the series of s that series matches by their
// outcome. Every series must name s's worker.
func countsByOutcome(t testing.TB, series *regexp.Regexp, s scraped) map[string]int {
	counts := map[string]int{}
	for _, m := range series.FindAllStringSubmatch(s.text, -1) {
		require.Equal(t, s.worker, label(m[1], workerLabel), "series %s", m[0])
		n, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		counts[label(m[1], "idempotency_outcome")] += n
	}
	return counts
}

// replaysPerWorker scrapes baseURL, each time on a new connection, until
// it has heard from every worker in workers (pids), and returns the
// replayed count of each. The kernel picks the worker of each connection,
// so this takes a few tries per worker.
func replaysPerWorker(t testing.TB, baseURL string, workers []string) map[string]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	replays := map[string]int{}
	seen := map[string]bool{}
	for try := 0; len(seen) < len(workers) && try < 100*len(workers); try++ {
		s := scrape(t, client, baseURL)
		seen[s.worker] = true
		replays[s.worker] = s.requests["replayed"]
	}
	require.Len(t, seen, len(workers), "scraped workers %v of %v", seen, workers)
	return replays
}
