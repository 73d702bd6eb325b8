package main

// The multi-process harness: build the example binary once, start it with
// given flags on a free loopback port, and run a duplicate storm against it.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exampleBuild is the example binary, built once per test binary run and
// removed by TestMain.
var exampleBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildExample returns the path of the example binary, building it on the
// first call (with -race when this test binary has it).
func buildExample(t testing.TB) string {
	t.Helper()
	exampleBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "idempotency-example-")
		if err != nil {
			exampleBuild.err = err
			return
		}
		exampleBuild.dir = dir
		path := filepath.Join(dir, "example")
		args := []string{"build", "-o", path}
		if raceBuilt() {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			exampleBuild.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		exampleBuild.path = path
	})
	require.NoError(t, exampleBuild.err)
	return exampleBuild.path
}

// raceBuilt reports whether this test binary runs with the race detector.
func raceBuilt() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleBuild.dir != "" {
		_ = os.RemoveAll(exampleBuild.dir)
	}
	os.Exit(code)
}

// exampleProc is a running example binary.
type exampleProc struct {
	// URL is the service's base URL, http://127.0.0.1:PORT.
	URL string

	t       testing.TB
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{} // closed once the process has exited; waitErr is then set
	waitErr error
	stopped bool
}

// startExample starts the example binary with args on a free loopback port
// (it adds -addr) and returns once it answers GET /payments and, with
// -workers N, once N workers have logged "worker started". The process is
// stopped when the test ends (see Stop).
func startExample(t testing.TB, args ...string) *exampleProc {
	t.Helper()
	bin := buildExample(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cmd := exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	p := &exampleProc{URL: "http://" + addr, t: t, cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = workerAttr()   // stopped with this test binary, should it die
	cmd.WaitDelay = 10 * time.Second // workers left behind must not hold its log open forever
	require.NoError(t, cmd.Start())
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.Stop)

	workers := 1
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "-workers="); ok {
			workers, _ = strconv.Atoi(v)
		} else if a == "-workers" && i+1 < len(args) {
			workers, _ = strconv.Atoi(args[i+1])
		}
	}
	p.waitWorkers(workers)
	return p
}

// waitWorkers waits until the service answers GET /payments and at least n
// worker processes are alive, as the log tells. It fails the test if the
// process exits or a minute passes first.
func (p *exampleProc) waitWorkers(n int) {
	p.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.exited:
			p.t.Fatalf("example exited: %v\n%s", p.waitErr, p.log)
		default:
		}
		if len(p.Pids()) >= n {
			resp, err := client.Get(p.URL + "/payments")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("example not ready with %d workers after a minute\n%s", n, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pids returns the pids of the live worker processes, in the order they
// started: those that logged "worker started" and of which the supervisor
// has not logged "worker exited". With -workers 1 it is the one process.
func (p *exampleProc) Pids() []int {
	log := p.log.String()
	exited := logPids(log, "worker exited")
	var live []int
	for _, pid := range logPids(log, "worker started") {
		if !slices.Contains(exited, pid) {
			live = append(live, pid)
		}
	}
	return live
}

// Kill sends SIGKILL to the worker pid, which must be one of Pids, and
// waits until it is gone from Pids. Under a supervisor (-workers above 1) a
// new worker takes its place: wait for it with waitWorkers. With -workers 1
// the worker is the example process itself: Kill waits for it to exit, and
// Stop then has nothing left to check.
func (p *exampleProc) Kill(pid int) {
	p.t.Helper()
	require.Contains(p.t, p.Pids(), pid, "not a live worker of this example")
	proc, err := os.FindProcess(pid)
	require.NoError(p.t, err)
	require.NoError(p.t, proc.Kill())
	if pid == p.cmd.Process.Pid {
		<-p.exited
		p.stopped = true
		return
	}
	require.Eventually(p.t, func() bool { return !slices.Contains(p.Pids(), pid) }, time.Minute,
		10*time.Millisecond, "the supervisor did not see worker %d exit\n%s", pid, p.log)
}

// Log returns everything the process and its workers have written so far.
func (p *exampleProc) Log() string { return p.log.String() }

// Stop sends SIGTERM and waits for the process to exit. The test fails if
// it does not exit cleanly within 30 seconds (it is then killed) or if the
// race detector reported anything. Stop runs at the end of every test that
// started the process; calling it again does nothing.
func (p *exampleProc) Stop() {
	p.t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have exited already
	select {
	case <-p.exited:
		assert.NoError(p.t, p.waitErr, "example exit status")
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("example did not stop within 30s of SIGTERM")
	}
	assert.NotContains(p.t, p.Log(), "WARNING: DATA RACE")
	if p.t.Failed() {
		p.t.Logf("example log:\n%s", p.Log())
	}
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
	res := stormResult{workers: map[string]int{}}
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
			start := make(chan struct{})
			var wg sync.WaitGroup
			for d := range dups {
				wg.Go(func() {
					<-start
					resp, conflicts, err := postUntilDone(client, baseURL, key, body)
					if err != nil {
						fail("key %s: %v", key, err)
					}
					mu.Lock()
					defer mu.Unlock()
					answers[k][d] = resp
					res.conflicts += conflicts
					res.workers[resp.worker]++
				})
			}
			close(start)
			wg.Wait()
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

// listPayments returns GET /payments.
func listPayments(t testing.TB, client *http.Client, baseURL string) []payment {
	t.Helper()
	resp, err := client.Get(baseURL + "/payments")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var payments []payment
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&payments))
	return payments
}
