package main

import (
	"testing"
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

// TestExampleMySQLTxChaos: TestExamplePostgresTxChaos (see requireTxChaos)
// on MySQL in transactional mode.
func TestExampleMySQLTxChaos(t *testing.T) {
	db := newMySQLTestDB(t)
	p := startExample(t, "-store", "mysql", "-mysql-dsn", db.DSN, "-workers", "4", "-delay", "300ms")
	requireTxChaos(t, p, db.count, db.paymentsOf)
}
