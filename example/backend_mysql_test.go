package main

import (
	"time"

	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExampleStormMySQL: four worker processes share records and the
// ledger through MySQL, in transactional mode; 100 keys x 20 concurrent
// duplicates give exactly one payment per key, and every duplicate the
// same answer.
func TestExampleStormMySQL(t *testing.T) {
	db := newMySQLTestDB(t)
	p := startExample(t, "-store", "mysql", "-mysql-dsn", db.DSN, "-workers", "4", "-delay", "300ms")
	requireSharedStorm(t, p, db.count)
}

// TestExampleStormMySQLPlain is TestExampleStormMySQL with the plain store
// (-mysql-tx=false).
func TestExampleStormMySQLPlain(t *testing.T) {
	db := newMySQLTestDB(t)
	p := startExample(t, "-store", "mysql", "-mysql-tx=false", "-mysql-dsn", db.DSN, "-workers", "4", "-delay", "300ms")
	requireSharedStorm(t, p, db.count)
}

// TestExampleMySQLTxChaos: TestExamplePostgresTxChaos (see requireChaosSurvived)
// on MySQL in transactional mode.
func TestExampleMySQLTxChaos(t *testing.T) {
	db := newMySQLTestDB(t)
	p := startExample(t, "-store", "mysql", "-mysql-dsn", db.DSN, "-workers", "4", "-delay", "300ms")
	requireChaosSurvived(t, p, 5, 700*time.Millisecond, db.paymentsOf, db.count)
}

// TestExampleMySQLTxWorkerKilled: the worker running a request is
// SIGKILLed after the handler inserted the payment and before the commit
// (during -delay). The server rolls the transaction back when the worker's
// connection drops, and frees the key's named lock with it: no payment and
// no done record are left, and the key is free at once, without waiting
// for a lease. The client's retry, sent by several clients at once,
// creates exactly one payment.
func TestExampleMySQLTxWorkerKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("example: finding the worker that holds a connection reads /proc")
	}
	db := newMySQLTestDB(t)
	p := startExample(t, "-store", "mysql", "-mysql-dsn", db.DSN, "-workers", "2", "-delay", "2s")

	first, holder := postTracked(t, p, faultKey("killed", 0), faultBody(0))
	waitProviderKeys(t, p, 1) // logged once the handler inserted its payment
	assert.Zero(t, db.count(t, "payments", ""), "the payment is not visible before the commit")
	assert.Equal(t, 1, db.count(t, "idempotency_keys", "state = 1 AND held = 1"), "the claim is held by the transaction")

	killed := killHolder(t, p, first, holder)
	assert.Zero(t, db.count(t, "payments", ""), "the killed run left no payment")
	assert.Zero(t, db.count(t, "idempotency_keys", "state <> 1"), "nor a done record")

	retryKilled(t, p, killed)
	assert.Equal(t, 1, db.count(t, "payments", ""), "exactly one payment: the retry's")
	keys := waitProviderKeys(t, p, 2)
	assert.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1], "the retry sends the provider the killed run's key")
	assert.Equal(t, 1, db.count(t, "idempotency_keys", "state = 2 AND fence = 2"), "completed, taken over once")
	p.waitWorkers(2)
}

// TestExampleMySQLSealed is issue 38's target on MySQL, over the raw rows
// of the idempotency table (see requireSealedAtRest).
func TestExampleMySQLSealed(t *testing.T) {
	db := newMySQLTestDB(t)
	requireSealedAtRest(t, func(ring string) *exampleProc {
		return startExample(t, "-store", "mysql", "-mysql-dsn", db.DSN, "-seal-keys", ring)
	}, func() [][]byte { return rawRows(t, db.admin, db.name+".idempotency_keys") },
		func() int { return db.count(t, "payments", "") })
}
