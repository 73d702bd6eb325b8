package main

// Helpers shared by the tests: a log buffer, the in-process API under test,
// and the duplicate storm the multi-process tests send to a running example.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// syncBuffer is a bytes.Buffer safe for one writer and many readers at
// once: the log of a process or of a logger under test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logPids returns the pid attribute of every slog text line in log whose
// message starts with msg, in order, without repeats.
func logPids(log, msg string) []int {
	re := regexp.MustCompile(fmt.Sprintf(`msg="?%s[^=]*pid=(\d+)`, regexp.QuoteMeta(msg)))
	var pids []int
	seen := map[int]bool{}
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		pid, _ := strconv.Atoi(m[1]) // the pattern matched digits only
		if !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

// redisURL starts a redis-server of the test's own (see startPrivateRedis)
// and returns its URL, so that nothing the example writes outlives the
// test. Each call starts another server.
func redisURL(t *testing.T) string {
	t.Helper()
	return startPrivateRedis(t).URL()
}

// freeAddr returns a loopback host:port that was free a moment ago, for a
// server the test is about to start.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// testAccount is the API key, and so the account, every test request is
// sent with unless it says otherwise.
const testAccount = "sk_test_alice"

// asCaller sends req with key as its API key, the username of HTTP Basic
// auth, as the example's clients do; no key sends no credentials.
func asCaller(req *http.Request, key string) {
	if key != "" {
		req.SetBasicAuth(key, "")
	}
}

// testAPI serves the example's router, with the middleware's default
// in-memory store, on an httptest server.
type testAPI struct {
	url  string
	led  ledger
	logs *syncBuffer
}

func newTestAPI(t *testing.T, led ledger) *testAPI {
	t.Helper()
	return newTestAPIOn(t, led, nil)
}

// newTestAPIOn is newTestAPI with its payments' records in st (nil: a
// memory store).
func newTestAPIOn(t *testing.T, led ledger, st store.Store) *testAPI {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	a := withProvider(t, &api{ledger: led, log: logger, jobs: store.NewMemory()})
	srv := httptest.NewServer(a.routes(newMiddleware(st, 30*time.Second, logger), newWebhookMiddleware(nil, 30*time.Second, logger)))
	t.Cleanup(srv.Close)
	return &testAPI{url: srv.URL, led: led, logs: logs}
}

// withProvider points a's client of the fake provider at an httptest
// server of a's own routes, as serve points it at the worker's listener,
// and returns a.
func withProvider(t *testing.T, a *api) *api {
	t.Helper()
	srv := httptest.NewServer(a.routes(newMiddleware(nil, time.Minute, a.log), newWebhookMiddleware(nil, time.Minute, a.log)))
	t.Cleanup(srv.Close)
	a.provider, a.providerURL = newProviderClient(), srv.URL+"/provider/charges"
	return a
}

// answer is a response read in full.
type answer struct {
	status int
	header http.Header
	body   string
}

// post sends body to path with the Idempotency-Key key, if not empty, as
// testAccount.
func (ta *testAPI) post(t *testing.T, path, key, body string) answer {
	t.Helper()
	return ta.postAs(t, testAccount, path, key, body)
}

// postAs is post as the caller with API key account ("": no credentials).
func (ta *testAPI) postAs(t *testing.T, account, path, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ta.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	asCaller(req, account)
	return do(t, req)
}

// get gets path as testAccount.
func (ta *testAPI) get(t *testing.T, path string) answer {
	t.Helper()
	return ta.getAs(t, testAccount, path)
}

// getAs is get as the caller with API key account ("": no credentials).
func (ta *testAPI) getAs(t *testing.T, account, path string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ta.url+path, nil)
	require.NoError(t, err)
	asCaller(req, account)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (ta *testAPI) ledgerLen(t *testing.T) int {
	t.Helper()
	payments, err := ta.led.List(context.Background(), testAccount)
	require.NoError(t, err)
	return len(payments)
}

// stormResponse is what a client of the storm finally got for a key: the
// first answer that was not a 409.
type stormResponse struct {
	stormContent
	replayed bool   // Idempotent-Replayed: true
	worker   string // X-Worker-Pid
}

// stormContent is the part of an answer that a replay must repeat exactly.
type stormContent struct {
	status      int
	body        string
	location    string
	contentType string
}

// stormResult tells how a storm went.
type stormResult struct {
	conflicts int            // 409 answers, each retried
	workers   map[string]int // final answers per X-Worker-Pid
	replays   map[string]int // replayed final answers per X-Worker-Pid
}

// retryTimeout is how long a client of the storm retries 409s before it
// gives up, failing the storm.
const retryTimeout = time.Minute

// stormInFlight bounds the requests of a storm in flight at once, below
// what the race detector allows in goroutines.
const stormInFlight = 500

// runStorm sends dups concurrent POST /payments with the same
// Idempotency-Key and body, for each of keys fresh keys, to baseURL, each
// request on a new connection; a client that gets 409 retries after
// Retry-After (at most 200 ms) until it gets something else. It then
// checks that every key got exactly one fresh (not replayed) 201, that
// every replay has the fresh answer's status, body, Location and
// Content-Type, and that GET /payments grew by exactly keys payments, with
// the ids of the fresh answers. The duplicates of one key all start
// together; keys overlap, with up to stormInFlight requests at once.
// Nothing else may create payments on the same ledger meanwhile.
func runStorm(t testing.TB, baseURL string, keys, dups int) stormResult {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	before := listPayments(t, client, baseURL)
	run := newPaymentID()[len("pay_"):] // keys never seen before, even by a shared store
	began := time.Now()

	answers := make([][]stormResponse, keys)
	res := stormResult{workers: map[string]int{}, replays: map[string]int{}}
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	slots := make(chan struct{}, max(1, stormInFlight/dups))
	var keysWG sync.WaitGroup
	for k := range keys {
		slots <- struct{}{}
		answers[k] = make([]stormResponse, dups)
		key := fmt.Sprintf("storm-%s-%d", run, k)
		body := fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+k)
		keysWG.Go(func() {
			defer func() { <-slots }()
			storetest.Together(dups, func(d int) {
				resp, conflicts, err := postUntilDone(client, baseURL, key, body)
				if err != nil {
					fail("key %s: %v", key, err)
				}
				mu.Lock()
				defer mu.Unlock()
				answers[k][d] = resp
				res.conflicts += conflicts
				res.workers[resp.worker]++
				if resp.replayed {
					res.replays[resp.worker]++
				}
			})
		})
	}
	keysWG.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, the first: %s", len(failures), strings.Join(failures[:min(10, len(failures))], "; "))
	}

	var freshIDs []string
	for k, got := range answers {
		var fresh []stormResponse
		for _, a := range got {
			if !a.replayed {
				fresh = append(fresh, a)
			}
		}
		require.Equal(t, 1, len(fresh), "key %d: fresh (not replayed) answers", k)
		f := fresh[0]
		require.Equal(t, http.StatusCreated, f.status, "key %d: %s", k, f.body)
		for _, a := range got {
			require.Equal(t, f.stormContent, a.stormContent, "key %d: a replay differs from the fresh answer", k)
		}
		var p payment
		require.NoError(t, json.Unmarshal([]byte(f.body), &p), "key %d", k)
		freshIDs = append(freshIDs, p.ID)
	}

	after := listPayments(t, client, baseURL)
	assert.Len(t, after, len(before)+keys, "the ledger must grow by exactly one payment per key")
	var ids []string
	for _, p := range after {
		ids = append(ids, p.ID)
	}
	for _, id := range freshIDs {
		assert.Contains(t, ids, id, "a fresh answer's payment is not in the ledger")
	}
	t.Logf("storm: %d keys x %d duplicates in %v, %d 409s retried, answers per worker pid %v",
		keys, dups, time.Since(began).Round(time.Millisecond), res.conflicts, res.workers)
	return res
}

// runAccountStorm sends one payment for each of accounts fresh accounts
// (API keys), under one Idempotency-Key per account, from clients clients
// at once per account, each on new connections, retrying each 409 every
// every. It requires that every client finally gets 201 (any other status,
// or a transport error, fails the storm), that the clients of one account
// get the same body, and that each account lists exactly one payment.
func runAccountStorm(t testing.TB, baseURL string, accounts, clients int, every time.Duration) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	run := newPaymentID()[len("pay_"):] // accounts and keys never seen before
	account := func(a int) string { return fmt.Sprintf("sk_test_%s_%d", run, a) }
	began := time.Now()
	bodies := make([][]string, accounts)
	for a := range bodies {
		bodies[a] = make([]string, clients)
	}
	var mu sync.Mutex
	var failures []string
	statuses := map[int]int{}
	storetest.Together(accounts*clients, func(i int) {
		a, c := i/clients, i%clients
		body := fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 100+a)
		for deadline := time.Now().Add(retryTimeout); ; time.Sleep(every) {
			status, got, err := postAsAccount(client, baseURL, account(a), fmt.Sprintf("pay-%s-%d", run, a), body)
			mu.Lock()
			statuses[status]++
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("account %d client %d: %v", a, c, err))
			case status == http.StatusConflict && time.Now().Before(deadline):
				mu.Unlock()
				continue
			case status != http.StatusCreated:
				failures = append(failures, fmt.Sprintf("account %d client %d: %d %s", a, c, status, got))
			default:
				bodies[a][c] = got
			}
			mu.Unlock()
			return
		}
	})
	t.Logf("account storm: %d accounts x %d clients in %v, answers by status %v (0: transport errors)",
		accounts, clients, time.Since(began).Round(time.Millisecond), statuses)
	require.Empty(t, failures, "every client gets 201")
	for a, got := range bodies {
		for c := range got {
			assert.Equal(t, got[0], got[c], "account %d: client %d got another body", a, c)
		}
		payments := getList[payment](t, client, baseURL+"/payments", account(a))
		assert.Len(t, payments, 1, "account %d is paid once", a)
	}
}

// postAsAccount posts body to /payments under key as account and returns the
// answer's status and body.
func postAsAccount(client *http.Client, baseURL, account, key, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, baseURL+"/payments", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	asCaller(req, account)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// postUntilDone posts body under key until the answer is not a 409,
// waiting Retry-After (capped to 200 ms) between tries. It returns that
// answer and the number of 409s before it, or an error if it still gets
// 409 after retryTimeout.
func postUntilDone(client *http.Client, baseURL, key, body string) (stormResponse, int, error) {
	deadline := time.Now().Add(retryTimeout)
	for conflicts := 0; ; conflicts++ {
		req, err := http.NewRequest(http.MethodPost, baseURL+"/payments", strings.NewReader(body))
		if err != nil {
			return stormResponse{}, conflicts, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		asCaller(req, testAccount)
		resp, err := client.Do(req)
		if err != nil {
			return stormResponse{}, conflicts, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return stormResponse{}, conflicts, err
		}
		if resp.StatusCode != http.StatusConflict {
			return stormResponse{
				stormContent: stormContent{
					status:      resp.StatusCode,
					body:        string(b),
					location:    resp.Header.Get("Location"),
					contentType: resp.Header.Get("Content-Type"),
				},
				replayed: resp.Header.Get("Idempotent-Replayed") == "true",
				worker:   resp.Header.Get("X-Worker-Pid"),
			}, conflicts, nil
		}
		if time.Now().After(deadline) {
			return stormResponse{}, conflicts, fmt.Errorf("still 409 after %d tries in %v", conflicts+1, retryTimeout)
		}
		wait := 200 * time.Millisecond
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			wait = min(wait, time.Duration(s)*time.Second)
		}
		time.Sleep(wait)
	}
}

// listPayments returns GET /payments, testAccount's payments.
func listPayments(t testing.TB, client *http.Client, baseURL string) []payment {
	t.Helper()
	return getList[payment](t, client, baseURL+"/payments", testAccount)
}

// getList returns the JSON array that GET url answers with 200, sent as
// the caller with API key account ("": no credentials).
func getList[T any](t testing.TB, client *http.Client, url, account string) []T {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	asCaller(req, account)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list []T
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	return list
}

// providerKeys returns the provider_key of every "payment made" line of
// log, in order.
func providerKeys(log string) []string {
	var keys []string
	for _, m := range regexp.MustCompile(`msg="payment made".* provider_key=(\S+)`).FindAllStringSubmatch(log, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// waitProviderKeys waits until the example's log holds n "payment made"
// lines, and returns their provider keys.
func waitProviderKeys(t *testing.T, p *exampleProc, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(providerKeys(p.Log())) >= n }, 30*time.Second, 10*time.Millisecond,
		"%d payments logged", n)
	return providerKeys(p.Log())
}

// requireSharedStorm sends 100 keys x 20 concurrent duplicates to p's
// workers, which share one database, and requires answers from several
// workers, duplicates that met their first request in flight, and, as
// count reads the database's tables, one payment and one completed record
// per key.
func requireSharedStorm(t *testing.T, p *exampleProc, count func(t *testing.T, table, where string) int) {
	t.Helper()
	res := runStorm(t, p.URL, 100, 20)
	assert.Greater(t, len(res.workers), 1, "answers came from several worker processes")
	assert.Positive(t, res.conflicts, "no duplicate arrived while its first request was running")
	assert.Equal(t, 100, count(t, "payments", ""))
	assert.Equal(t, 100, count(t, "idempotency_keys", "state = 2"), "one completed record per key")
}

// sealedPayment sends the k-th payment of a sealing test, under its own
// key and amount, as testAccount.
func sealedPayment(t *testing.T, baseURL string, k int) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/payments", strings.NewReader(fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, 7000+k)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("sealed-%d", k))
	asCaller(req, testAccount)
	return do(t, req)
}

// requireSealedAtRest is issue 38's target: after 100 payments to the
// example start runs with a ring of one key, no record dump returns (the
// store's raw values, one per record) holds a payment's body or header in
// plain text; restarted with a new key first and the old one kept, all 100
// replay byte for byte; restarted without the old key, each is 503
// record-sealed, and paid still counts 100.
func requireSealedAtRest(t *testing.T, start func(ring string) *exampleProc, dump func() [][]byte, paid func() int) {
	t.Helper()
	const payments = 100
	dir := t.TempDir()
	p := start(writeRing(t, dir, "2026-01"))
	first := make([]answer, payments)
	for k := range payments {
		first[k] = sealedPayment(t, p.URL, k)
		require.Equal(t, http.StatusCreated, first[k].status, first[k].body)
	}
	p.Stop()
	records := dump()
	require.Len(t, records, payments)
	for k, a := range first {
		var made payment
		require.NoError(t, json.Unmarshal([]byte(a.body), &made))
		for _, plain := range []string{made.ID, a.header.Get("Location"), "application/json", `"amount"`, "Location"} {
			for _, record := range records {
				require.False(t, bytes.Contains(record, []byte(plain)), "payment %d: a record holds %q", k, plain)
			}
		}
	}

	p = start(writeRing(t, dir, "2026-06", "2026-01"))
	for k := range payments {
		replay := sealedPayment(t, p.URL, k)
		require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		require.Equal(t, first[k].body, replay.body, "payment %d", k)
		for _, name := range []string{"Content-Type", "Location", "Content-Length"} {
			require.Equal(t, first[k].header.Get(name), replay.header.Get(name), "payment %d: %s", k, name)
		}
	}
	p.Stop()

	p = start(writeRing(t, dir, "2026-06"))
	for k := range payments {
		a := sealedPayment(t, p.URL, k)
		require.Equal(t, http.StatusServiceUnavailable, a.status)
		require.Contains(t, a.body, idempotency.ProblemRecordSealed)
	}
	p.Stop()
	require.Contains(t, p.Log(), "seal: sealed under a key not in the ring")
	assert.Equal(t, payments, paid(), "one payment per key, none run again")
}

// rawRows returns every row of table in db, each its columns' bytes one
// after the other, for requireSealedAtRest's dump.
func rawRows(t *testing.T, db *sql.DB, table string) [][]byte {
	t.Helper()
	rows, err := db.Query("SELECT * FROM " + table)
	require.NoError(t, err)
	defer rows.Close()
	columns, err := rows.Columns()
	require.NoError(t, err)
	values := make([]sql.RawBytes, len(columns))
	dest := make([]any, len(columns))
	for i := range values {
		dest[i] = &values[i]
	}
	var dump [][]byte
	for rows.Next() {
		require.NoError(t, rows.Scan(dest...))
		var row []byte
		for _, v := range values {
			row = append(row, v...)
		}
		dump = append(dump, row)
	}
	require.NoError(t, rows.Err())
	return dump
}
