//go:build unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSupervisor is a supervisor running in the background.
type testSupervisor struct {
	logs   *syncBuffer
	cancel context.CancelFunc // stops it
	done   <-chan error       // gets its result
}

// runSupervisor runs a supervisor of n workers started by command until it
// is stopped (see requireStops) or the test ends.
func runSupervisor(t *testing.T, n int, command func() *exec.Cmd) *testSupervisor {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logs := &syncBuffer{}
	s := supervisor{workers: n, log: slog.New(slog.NewTextHandler(logs, nil)), command: command}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	return &testSupervisor{logs: logs, cancel: cancel, done: done}
}

// pids returns the pids of the supervisor's log lines whose message starts
// with msg (see logPids).
func (s *testSupervisor) pids(msg string) []int { return logPids(s.logs.String(), msg) }

// commandSequence returns a supervisor's command function that starts the
// commands given, one per call, and the last one again from then on.
func commandSequence(commands ...[]string) func() *exec.Cmd {
	started := 0
	return func() *exec.Cmd {
		c := commands[min(started, len(commands)-1)]
		started++
		return exec.Command(c[0], c[1:]...)
	}
}

// requireStops cancels a supervisor's context and requires it to stop,
// without an error, in the time stopping may take.
func (s *testSupervisor) requireStops(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		require.NoError(t, err)
	case <-time.After(stopTimeout + 5*time.Second):
		t.Fatal("the supervisor did not stop")
	}
}

// waitSpawned waits until the supervisor has logged n spawned workers and
// returns their pids.
func (s *testSupervisor) waitSpawned(t *testing.T, n int) []int {
	t.Helper()
	require.Eventually(t, func() bool { return len(s.pids("worker spawned")) >= n },
		10*time.Second, 10*time.Millisecond, "workers spawned:\n%s", s.logs)
	return s.pids("worker spawned")
}

// gone reports whether no process has the pid.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestSupervisorRestartsKilledWorkerAndStopsAll(t *testing.T) {
	s := runSupervisor(t, 2, commandSequence([]string{"sleep", "600"}))

	first := s.waitSpawned(t, 2)
	require.NoError(t, syscall.Kill(first[0], syscall.SIGKILL))
	all := s.waitSpawned(t, 3)
	assert.Equal(t, first, all[:2])
	assert.Equal(t, []int{first[0]}, s.pids("worker exited"))
	assert.False(t, gone(first[1]), "the other worker must keep running")

	s.requireStops(t)
	for _, pid := range all {
		assert.True(t, gone(pid), "worker %d still running", pid)
	}
}

func TestSupervisorGivesUpOnWorkerFailingAtStart(t *testing.T) {
	s := runSupervisor(t, 1, commandSequence([]string{"false"}))
	select {
	case err := <-s.done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "giving up")
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor kept restarting a worker that always fails")
	}
	assert.Len(t, s.pids("worker exited"), maxQuickExits)
}

func TestSupervisorStopsOthersWhenWorkerCannotStart(t *testing.T) {
	s := runSupervisor(t, 3, commandSequence([]string{"sleep", "600"}, []string{"sleep", "600"}, []string{"/nonexistent/worker"}))
	err := <-s.done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "starting a worker")
	for _, pid := range s.pids("worker spawned") {
		assert.True(t, gone(pid), "worker %d still running", pid)
	}
	assert.Len(t, s.pids("worker spawned"), 2)
}

// TestSupervisorKeepsRestartingWhileAnotherWorkerRuns: a worker that keeps
// failing at start-up (its backend is down, say) is restarted again and
// again while another worker runs, and the running one is never stopped for
// it: the supervisor gives up only when every worker fails.
func TestSupervisorKeepsRestartingWhileAnotherWorkerRuns(t *testing.T) {
	s := runSupervisor(t, 2, commandSequence([]string{"sleep", "600"}, []string{"false"}))

	healthy := s.waitSpawned(t, 1)[0]
	require.Eventually(t, func() bool { return len(s.pids("worker exited")) >= maxQuickExits+2 },
		30*time.Second, 20*time.Millisecond, "quick exits:\n%s", s.logs)
	select {
	case err := <-s.done:
		t.Fatalf("the supervisor stopped while a worker was running: %v\n%s", err, s.logs)
	default:
	}
	assert.False(t, gone(healthy), "the running worker must keep running")
	assert.NotContains(t, s.pids("worker exited"), healthy)

	s.requireStops(t)
	assert.True(t, gone(healthy), "worker %d still running", healthy)
}

// TestExampleRestartsKilledWorker: the supervisor replaces a SIGKILLed
// worker, and both live workers then serve a storm (on a Redis of the
// test's own, gone when it ends).
func TestExampleRestartsKilledWorker(t *testing.T) {
	p := startExample(t, "-store", "redis", "-redis-url", startPrivateRedis(t).URL(), "-workers", "2")
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
