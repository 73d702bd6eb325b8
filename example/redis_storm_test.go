package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
)

// redisURL returns REDIS_URL, or skips the test when it is unset.
func redisURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the example against Redis")
	}
	return url
}

// TestExampleStormRedis: four worker processes share one Redis; 100 keys,
// each posted by 20 concurrent clients, are charged exactly once each (see
// runStorm), whichever workers the duplicates reach.
func TestExampleStormRedis(t *testing.T) {
	p := startExample(t, "-store", "redis", "-redis-url", redisURL(t), "-workers", "4", "-delay", "300ms")
	res := runStorm(t, p.URL, 100, 20)
	assert.Len(t, res.workers, 4, "every worker answered some of the storm: %v", res.workers)
	assert.Positive(t, res.conflicts, "no duplicate arrived while its first request was running")
}
