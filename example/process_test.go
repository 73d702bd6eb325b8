package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExampleStormMemory(t *testing.T) {
	p := startExample(t, "-store", "memory", "-workers", "1", "-delay", "300ms")
	res := runStorm(t, p.URL, 100, 20)
	pids := p.Pids()
	require.Len(t, pids, 1)
	assert.Equal(t, map[string]int{strconv.Itoa(pids[0]): 100 * 20}, res.workers)
	assert.Positive(t, res.conflicts, "no duplicate arrived while its first request was running")
	p.Stop()
	assert.Contains(t, p.Log(), `msg="worker stopping"`)
}

func TestExampleRefusesMemoryStoreWithWorkers(t *testing.T) {
	out, err := exec.Command(buildExample(t), "-addr", "127.0.0.1:0", "-store", "memory", "-workers", "2").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v\n%s", err, out)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, string(out), "the memory store keeps its records inside one process")
	assert.Contains(t, string(out), "use -store redis or -store postgres")
}

func TestExampleRestartsKilledWorker(t *testing.T) {
	p := startExample(t, "-store", "redis", "-redis-url", redisURL(t), "-workers", "2")
	before := p.Pids()
	require.Len(t, before, 2)
	p.Kill(before[0])
	p.waitWorkers(2)
	after := p.Pids()
	require.Len(t, after, 2)
	assert.Equal(t, before[1], after[0], "the other worker kept running")
	assert.NotContains(t, before, after[1], "a new worker took the killed one's place")

	res := runStorm(t, p.URL, 20, 10)
	assert.Equal(t, map[string]bool{strconv.Itoa(after[0]): true, strconv.Itoa(after[1]): true},
		workerSet(res.workers), "both live workers answered")
	p.Stop()
	assert.Contains(t, p.Log(), `msg="restarting the worker"`)
}

// workerSet returns the pids that answered a storm.
func workerSet(answers map[string]int) map[string]bool {
	set := map[string]bool{}
	for pid := range answers {
		set[pid] = true
	}
	return set
}

func TestExampleKillSingleWorker(t *testing.T) {
	p := startExample(t, "-store", "memory")
	p.Kill(p.Pids()[0])
	select {
	case <-p.exited:
	default:
		t.Fatal("Kill returned before the process exited")
	}
}

// TestExampleSecondSignalEndsItAtOnce: the first SIGINT stops the service
// gracefully, waiting for the request in progress; a second one ends it at
// once, as Ctrl-C pressed twice should.
func TestExampleSecondSignalEndsItAtOnce(t *testing.T) {
	p := startExample(t, "-store", "memory", "-delay", "20s")
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(`{"amount": 5, "currency": "EUR"}`))
		req.Header.Set("Idempotency-Key", "slow")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.URL + "/payments")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `"amount":5`)
	}, 10*time.Second, 20*time.Millisecond, "the payment is recorded and its handler is in its delay")

	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool { return strings.Contains(p.Log(), `msg="worker stopping"`) },
		5*time.Second, 10*time.Millisecond)
	select {
	case <-p.exited:
		t.Fatalf("the first signal did not wait for the request in progress\n%s", p.Log())
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.exited:
		p.stopped = true
	case <-time.After(5 * time.Second):
		t.Fatalf("a second signal did not end the example at once\n%s", p.Log())
	}
}

// TestExampleRefusesTakenPort: the workers share their port through
// SO_REUSEPORT, which would let them join another server's sockets bound
// the same way (another copy of the example) and split its traffic; the
// supervisor refuses a port that is not free instead.
func TestExampleRefusesTakenPort(t *testing.T) {
	other, err := listenShared(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, buildExample(t), "-addr", other.Addr().String(),
		"-store", "redis", "-redis-url", redisURL(t), "-workers", "2").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v\n%s", err, out)
	assert.Equal(t, 1, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "is not free (is another copy of this example running?)")
	assert.NotContains(t, string(out), "worker started")
}
