//go:build unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runSupervisor runs a supervisor of n workers started by command until
// ctx ends; its result arrives on the returned channel.
func runSupervisor(ctx context.Context, n int, logs *syncBuffer, command func() *exec.Cmd) <-chan error {
	s := supervisor{workers: n, log: slog.New(slog.NewTextHandler(logs, nil)), command: command}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	return done
}

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
func requireStops(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(stopTimeout + 5*time.Second):
		t.Fatal("the supervisor did not stop")
	}
}

// waitSpawned waits until the supervisor has logged n spawned workers and
// returns their pids.
func waitSpawned(t *testing.T, logs *syncBuffer, n int) []int {
	t.Helper()
	require.Eventually(t, func() bool { return len(logPids(logs.String(), "worker spawned")) >= n },
		10*time.Second, 10*time.Millisecond, "workers spawned:\n%s", logs)
	return logPids(logs.String(), "worker spawned")
}

// gone reports whether no process has the pid.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestSupervisorRestartsKilledWorkerAndStopsAll(t *testing.T) {
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runSupervisor(ctx, 2, logs, commandSequence([]string{"sleep", "600"}))

	first := waitSpawned(t, logs, 2)
	require.NoError(t, syscall.Kill(first[0], syscall.SIGKILL))
	all := waitSpawned(t, logs, 3)
	assert.Equal(t, first, all[:2])
	assert.Equal(t, []int{first[0]}, logPids(logs.String(), "worker exited"))
	assert.False(t, gone(first[1]), "the other worker must keep running")

	requireStops(t, cancel, done)
	for _, pid := range all {
		assert.True(t, gone(pid), "worker %d still running", pid)
	}
}

func TestSupervisorGivesUpOnWorkerFailingAtStart(t *testing.T) {
	logs := &syncBuffer{}
	done := runSupervisor(context.Background(), 1, logs, commandSequence([]string{"false"}))
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "giving up")
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor kept restarting a worker that always fails")
	}
	assert.Len(t, logPids(logs.String(), "worker exited"), maxQuickExits)
}

func TestSupervisorStopsOthersWhenWorkerCannotStart(t *testing.T) {
	logs := &syncBuffer{}
	s := supervisor{workers: 3, log: slog.New(slog.NewTextHandler(logs, nil))}
	s.command = commandSequence([]string{"sleep", "600"}, []string{"sleep", "600"}, []string{"/nonexistent/worker"})
	err := s.run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "starting a worker")
	for _, pid := range logPids(logs.String(), "worker spawned") {
		assert.True(t, gone(pid), "worker %d still running", pid)
	}
	assert.Len(t, logPids(logs.String(), "worker spawned"), 2)
}

// TestSupervisorKeepsRestartingWhileAnotherWorkerRuns: a worker that keeps
// failing at start-up (its backend is down, say) is restarted again and
// again while another worker runs, and the running one is never stopped for
// it: the supervisor gives up only when every worker fails.
func TestSupervisorKeepsRestartingWhileAnotherWorkerRuns(t *testing.T) {
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runSupervisor(ctx, 2, logs, commandSequence([]string{"sleep", "600"}, []string{"false"}))

	healthy := waitSpawned(t, logs, 1)[0]
	require.Eventually(t, func() bool { return len(logPids(logs.String(), "worker exited")) >= maxQuickExits+2 },
		30*time.Second, 20*time.Millisecond, "quick exits:\n%s", logs)
	select {
	case err := <-done:
		t.Fatalf("the supervisor stopped while a worker was running: %v\n%s", err, logs)
	default:
	}
	assert.False(t, gone(healthy), "the running worker must keep running")
	assert.NotContains(t, logPids(logs.String(), "worker exited"), healthy)

	requireStops(t, cancel, done)
	assert.True(t, gone(healthy), "worker %d still running", healthy)
}
