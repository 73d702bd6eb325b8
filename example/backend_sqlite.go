package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
	sqlitestore "github.com/seed43327c4c/idempotency/store_sqlite"
)

// sqlitePaymentsSchema is the ledger's tables: payments, with an index for
// listing one account's payments in the order they were made (rowid order),
// and a unique ref per payment (Create); and the tally webhook_events, each
// id's count. The idempotency table comes from sqlitestore's own schema
// through Migrate.
const sqlitePaymentsSchema = `
CREATE TABLE IF NOT EXISTS payments (
    id       TEXT    PRIMARY KEY,
    account  TEXT    NOT NULL,
    amount   INTEGER NOT NULL CHECK (amount > 0),
    currency TEXT    NOT NULL,
    ref      TEXT
);
CREATE INDEX IF NOT EXISTS payments_account ON payments (account);
CREATE TABLE IF NOT EXISTS webhook_events (
    id    TEXT    PRIMARY KEY,
    count INTEGER NOT NULL
)`

// sqliteProviderSchema is the fake provider's tally, provider_charges, in a
// file of its own (providerPath).
const sqliteProviderSchema = `
CREATE TABLE IF NOT EXISTS provider_charges (
    id    TEXT    PRIMARY KEY,
    count INTEGER NOT NULL
)`

// providerPath is the file of the fake provider's tally beside the ledger's
// file at path. The provider stands for another service: its writes must
// not wait for the ledger file's write lock, which a request in
// transactional mode holds from its ledger write to its commit (-delay
// included), and behind which the provider's count would time out busy.
func providerPath(path string) string { return path + "-provider" }

// openSQLite keeps records and payments in the SQLite file cfg.sqlitePath,
// in the tables idempotency_keys and payments, which every worker of this
// host opens. It creates the file and both tables at start-up if they are
// missing, safely from every worker at once, and runs the store's sweeper
// in every worker. A file that cannot serve (its directory missing, or
// read-only, locked past the busy timeout, not a database) fails the
// start-up; later failures make the middleware answer 503.
//
// By default the store is in transactional mode: the ledger's INSERT runs
// in the request's transaction, which stores its idempotency record, so a
// payment and its record commit together or not at all. That transaction
// holds the file's write lock from the INSERT to the commit, -delay
// included, so the workers' payments are written one at a time. With
// -sqlite-tx=false it is the plain store, and the ledger writes on its own.
func openSQLite(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	db, err := sqlitestore.Open(ctx, cfg.sqlitePath, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-sqlite-path: %w", err)
	}
	var opts []sqlitestore.Option
	if cfg.tombstones > 0 {
		opts = append(opts, sqlitestore.WithTombstones(cfg.tombstones))
	}
	plain := sqlitestore.New(db, opts...)
	var st store.Store = plain
	if cfg.sqliteTx {
		st = sqlitestore.NewTx(db, append(opts, sqlitestore.WithTxLease(cfg.lease))...)
	}
	if err := migrateSQLite(ctx, db, plain); err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}
	provider, err := openSQLiteProvider(ctx, providerPath(cfg.sqlitePath))
	if err != nil {
		_ = db.Close()
		return nil, nil, nil, err
	}
	closeDBs := func() { _ = db.Close(); _ = provider.Close() }
	return st, &sqliteLedger{db: db, provider: provider, inTx: cfg.sqliteTx}, sweepWhileOpen(plain.StartSweeper, closeDBs), nil
}

// openSQLiteProvider opens (creating it if missing) the provider's file at
// path and its table.
func openSQLiteProvider(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sqlitestore.Open(ctx, path, 0)
	if err == nil {
		_, err = db.ExecContext(ctx, sqliteProviderSchema)
		if err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the provider's file %s: %w", path, err)
	}
	return db, nil
}

// migrateSQLite creates the idempotency table and the ledger's table. The
// ledger's transaction begins with BEGIN IMMEDIATE (sqlitestore.Open sets
// it for db.BeginTx), so workers creating it at once wait for each other.
func migrateSQLite(ctx context.Context, db *sql.DB, st *sqlitestore.Store) error {
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err == nil {
		if err = createPaymentsTable(ctx, tx); err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
	}
	if err != nil {
		return fmt.Errorf("creating the payments table: %w", err)
	}
	return nil
}

// createPaymentsTable creates the ledger's table and its indexes. A table
// made before payments had refs gets the column, its old rows no ref.
func createPaymentsTable(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, sqlitePaymentsSchema); err != nil {
		return err
	}
	var hasRef bool
	err := tx.QueryRowContext(ctx, `SELECT count(*) > 0 FROM pragma_table_info('payments') WHERE name = 'ref'`).Scan(&hasRef)
	if err == nil && !hasRef {
		_, err = tx.ExecContext(ctx, `ALTER TABLE payments ADD COLUMN ref TEXT`)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, `CREATE UNIQUE INDEX IF NOT EXISTS payments_ref ON payments (ref)`)
	}
	return err
}

// sqliteLedger is a ledger in the payments table of the SQLite file,
// shared by every worker of this host.
type sqliteLedger struct {
	db       *sql.DB
	provider *sql.DB // the external tallies' file (providerPath)
	inTx     bool    // payments are written through the request's transaction
}

// writer returns what the ledger writes through: in transactional mode the
// request's transaction (see sqlitestore.Tx), so that a write commits only
// with the request's idempotency record, and a request without one is
// refused: its write would be unprotected. Otherwise db.
func (l *sqliteLedger) writer(ctx context.Context) (sqlitestore.Querier, error) {
	if !l.inTx {
		return l.db, nil
	}
	return sqlitestore.Tx(ctx)
}

// Create inserts the payment unless ref has one, and returns ref's payment.
func (l *sqliteLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	db, err := l.writer(ctx)
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	_, err = db.ExecContext(ctx, `INSERT INTO payments (id, account, amount, currency, ref) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (ref) DO NOTHING`, p.ID, account, p.Amount, p.Currency, ref)
	if err == nil { // the row of ref, this one or the one recorded before
		err = db.QueryRowContext(ctx, `SELECT id, amount, currency FROM payments WHERE ref = ?`, ref).Scan(&p.ID, &p.Amount, &p.Currency)
	}
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	return p, nil
}

func (l *sqliteLedger) List(ctx context.Context, account string) ([]payment, error) {
	payments, err := queryAll(ctx, l.db, paymentFields, `SELECT id, amount, currency FROM payments WHERE account = ? ORDER BY rowid`, account)
	if err != nil {
		return nil, fmt.Errorf("listing payments: %w", err)
	}
	return payments, nil
}

// Count builds its statement from t's name, one of the tallies, never from
// input. An external tally is written in its own file.
func (l *sqliteLedger) Count(ctx context.Context, t tally, id string) (int, error) {
	db, err := l.writer(ctx)
	if t.external {
		db, err = l.provider, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	var count int
	err = db.QueryRowContext(ctx, `INSERT INTO `+t.name+` (id, count) VALUES (?, 1)
ON CONFLICT (id) DO UPDATE SET count = count + 1 RETURNING count`, id).Scan(&count)
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	return count, nil
}

func (l *sqliteLedger) Counts(ctx context.Context, t tally) ([]eventCount, error) {
	if t.external {
		return listTally(ctx, l.provider, t)
	}
	return listTally(ctx, l.db, t)
}
