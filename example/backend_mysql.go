package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/seed43327c4c/idempotency/store"
	mysqlstore "github.com/seed43327c4c/idempotency/store_mysql"
)

// mysqlPaymentsSchema is the ledger's table, with an index for listing one
// account's payments and a unique ref per payment (Create). The
// idempotency table comes from mysqlstore's own schema through Migrate.
const mysqlPaymentsSchema = `
CREATE TABLE IF NOT EXISTS payments (
    id         VARCHAR(64)  NOT NULL PRIMARY KEY,
    account    VARCHAR(255) NOT NULL,
    amount     INT          NOT NULL CHECK (amount > 0),
    currency   VARCHAR(16)  NOT NULL,
    ref        VARCHAR(255),
    created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY payments_ref (ref),
    KEY payments_account (account, created_at, id)
) ENGINE = InnoDB`

// mysqlTallySchema is the table of one tally, each id's count; %s is its
// name.
const mysqlTallySchema = `
CREATE TABLE IF NOT EXISTS %s (
    id    VARCHAR(255) NOT NULL PRIMARY KEY,
    count INT          NOT NULL
) ENGINE = InnoDB`

// mysqlPoolSize bounds each worker's connections: a transactional request
// holds one while its handler runs, and the store leaves a quarter of
// them to the owners' calls.
const mysqlPoolSize = 10

// openMySQL keeps records and payments in MySQL or MariaDB at cfg.mysqlDSN,
// in the tables idempotency_keys and payments of the DSN's database. It
// creates both at start-up if they are missing, safely from every worker
// at once, and runs the store's sweeper in every worker.
//
// By default the store is in transactional mode: each protected request
// runs in a transaction of its own, which the ledger's INSERT joins, so a
// payment and its idempotency record commit together or not at all. With
// -mysql-tx=false it is the plain store: claims are leases, and the ledger
// writes through the pool.
func openMySQL(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	dsn, err := mysql.ParseDSN(cfg.mysqlDSN)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-mysql-dsn: %w", err)
	}
	connector, err := mysql.NewConnector(dsn)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-mysql-dsn: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(mysqlPoolSize)
	db.SetMaxIdleConns(mysqlPoolSize)
	var opts []mysqlstore.Option
	if cfg.tombstones > 0 {
		opts = append(opts, mysqlstore.WithTombstones(cfg.tombstones))
	}
	plain := mysqlstore.New(db, opts...)
	var st store.Store = plain
	if cfg.mysqlTx {
		st = mysqlstore.NewTx(db, opts...)
	}
	if err := migrateMySQL(ctx, db, plain); err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}
	provider := sql.OpenDB(connector)
	provider.SetMaxOpenConns(mysqlPoolSize)
	closeDBs := func() { _ = db.Close(); _ = provider.Close() }
	return st, &mysqlLedger{db: db, provider: provider, inTx: cfg.mysqlTx}, sweepWhileOpen(plain.StartSweeper, closeDBs), nil
}

// migrateMySQL creates the idempotency table and the ledger's tables (a
// CREATE TABLE IF NOT EXISTS, which MySQL runs safely from several
// sessions at once).
func migrateMySQL(ctx context.Context, db *sql.DB, st *mysqlstore.Store) error {
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	for _, schema := range []string{mysqlPaymentsSchema, fmt.Sprintf(mysqlTallySchema, webhookEvents.name), fmt.Sprintf(mysqlTallySchema, providerCharges.name)} {
		if _, err := db.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("creating the ledger's tables: %w", err)
		}
	}
	return nil
}

// mysqlLedger is a ledger in the payments table, shared by every worker.
type mysqlLedger struct {
	db       *sql.DB
	provider *sql.DB // the external tallies' connections
	inTx     bool    // payments are written through the request's transaction
}

// mysqlWriter is what the ledger writes through: a pool or a transaction.
type mysqlWriter interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// writer returns what the ledger writes through: in transactional mode the
// request's transaction (see mysqlstore.Tx), so that a write commits only
// with the request's idempotency record, and a request without one (which
// did not pass the middleware) is refused: its write would be unprotected.
// Otherwise the pool.
func (l *mysqlLedger) writer(ctx context.Context) (mysqlWriter, error) {
	if !l.inTx {
		return l.db, nil
	}
	tx, ok := mysqlstore.Tx(ctx)
	if !ok {
		return nil, errors.New("the request holds no idempotency transaction")
	}
	return tx, nil
}

// Create inserts the payment unless ref has one, and returns ref's payment.
func (l *mysqlLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	db, err := l.writer(ctx)
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	_, err = db.ExecContext(ctx, `INSERT INTO payments (id, account, amount, currency, ref) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE ref = ref`, p.ID, account, p.Amount, p.Currency, ref)
	if err == nil { // the row of ref, this one or the one recorded before
		err = db.QueryRowContext(ctx, `SELECT id, amount, currency FROM payments WHERE ref = ?`, ref).Scan(&p.ID, &p.Amount, &p.Currency)
	}
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	return p, nil
}

func (l *mysqlLedger) List(ctx context.Context, account string) ([]payment, error) {
	payments, err := queryAll(ctx, l.db, paymentFields, `SELECT id, amount, currency FROM payments WHERE account = ? ORDER BY created_at, id`, account)
	if err != nil {
		return nil, fmt.Errorf("listing payments: %w", err)
	}
	return payments, nil
}

// Count counts in one statement: LAST_INSERT_ID(expr) hands the row's new
// count back as the result's insert id. The statement is built from t's
// name, one of the tallies, never from input.
func (l *mysqlLedger) Count(ctx context.Context, t tally, id string) (int, error) {
	db, err := l.writer(ctx)
	if t.external {
		db, err = l.provider, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO `+t.name+` (id, count) VALUES (?, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE count = LAST_INSERT_ID(count + 1)`, id)
	var count int64
	if err == nil {
		count, err = res.LastInsertId()
	}
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	return int(count), nil
}

func (l *mysqlLedger) Counts(ctx context.Context, t tally) ([]eventCount, error) {
	return listTally(ctx, l.db, t)
}
