package main

import (
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
	assert.Equal(t, res.replays, replaysPerWorker(t, p.URL, []string{strconv.Itoa(pids[0])}),
		"idempotency_requests_total{idempotency_outcome=\"replayed\"} counts the replays the clients saw")
	p.Stop()
	assert.Contains(t, p.Log(), `msg="worker stopping"`)
}
