package main

import (
	"errors"
	"os/exec"
	"strconv"
	"testing"

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
