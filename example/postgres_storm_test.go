package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExampleStormPostgres: four worker processes share records and the
// ledger through Postgres; 100 keys x 20 concurrent duplicates give exactly
// one payment per key, and every duplicate the same answer.
func TestExampleStormPostgres(t *testing.T) {
	db := newPGTestDB(t)
	p := startExample(t, "-store", "postgres", "-database-url", db.URL, "-workers", "4", "-delay", "300ms")
	res := runStorm(t, p.URL, 100, 20)
	assert.Greater(t, len(res.workers), 1, "answers came from several worker processes")
	assert.Positive(t, res.conflicts, "no duplicate arrived while its first request was running")
	assert.Equal(t, 100, db.count(t, "payments", ""))
	assert.Equal(t, 100, db.count(t, "idempotency_keys", "state = 2"), "one completed record per key")
}
