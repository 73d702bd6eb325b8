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
