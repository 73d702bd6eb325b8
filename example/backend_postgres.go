package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed43327c4c/idempotency/store"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// paymentsSchema is the ledger's tables: payments, with an index for listing one
// account's payments and a unique ref per payment (Create); a table made
// before payments had accounts or refs gets the columns, its old rows no
// account and no ref; and the tallies webhook_events and provider_charges,
// each id's count. The idempotency table comes from pgstore's own schema
// through Migrate.
const paymentsSchema = `
CREATE TABLE IF NOT EXISTS payments (
    id         text        PRIMARY KEY,
    account    text        NOT NULL,
    amount     integer     NOT NULL CHECK (amount > 0),
    currency   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE payments ADD COLUMN IF NOT EXISTS account text NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN IF NOT EXISTS ref text;
CREATE INDEX IF NOT EXISTS payments_account ON payments (account, created_at, id);
CREATE UNIQUE INDEX IF NOT EXISTS payments_ref ON payments (ref);
CREATE TABLE IF NOT EXISTS webhook_events (
    id    text    PRIMARY KEY,
    count integer NOT NULL
);
CREATE TABLE IF NOT EXISTS provider_charges (
    id    text    PRIMARY KEY,
    count integer NOT NULL
)`

// openPostgres keeps records and payments in PostgreSQL at cfg.databaseURL,
// in the tables idempotency_keys and payments of the connection's
// search_path (add search_path=NAME to the URL to use another schema). It
// creates both tables at start-up if they are missing, safely from every
// worker at once, and runs the store's sweeper in every worker.
//
// By default the store is in transactional mode: each protected request
// runs in a transaction of its own, which the ledger's INSERT joins, so a
// payment and its idempotency record commit together or not at all. Each
// request holds one of the pool's connections while its handler runs (the
// pool size is pgxpool's default unless the URL sets pool_max_conns). With
// -postgres-tx=false it is the plain store: claims are leases, and the
// ledger writes through the pool.
func openPostgres(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	if cfg.databaseURL == "" {
		return nil, nil, nil, errors.New("-store postgres needs -database-url or $DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-database-url: %w", err)
	}
	var opts []pgstore.Option
	if cfg.tombstones > 0 {
		opts = append(opts, pgstore.WithTombstones(cfg.tombstones))
	}
	plain := pgstore.New(pool, opts...)
	var st store.Store = plain
	if cfg.postgresTx {
		st = pgstore.NewTx(pool, opts...)
	}
	provider, err := pgxpool.New(ctx, cfg.databaseURL)
	if err == nil {
		err = migratePostgres(ctx, pool, plain)
	}
	if err != nil {
		pool.Close()
		if provider != nil {
			provider.Close()
		}
		return nil, nil, nil, err
	}
	closePools := func() { pool.Close(); provider.Close() }
	return st, &postgresLedger{pool: pool, provider: provider, inTx: cfg.postgresTx}, sweepWhileOpen(plain.StartSweeper, closePools), nil
}

// migratePostgres creates the idempotency table and the ledger's table.
// The ledger's CREATE runs under an advisory lock, as pgstore's Migrate
// does, because concurrent CREATE TABLE IF NOT EXISTS can fail.
func migratePostgres(ctx context.Context, pool *pgxpool.Pool, st *pgstore.Store) error {
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('example payments', 0))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, paymentsSchema)
		return err
	})
	if err != nil {
		return fmt.Errorf("creating the payments table: %w", err)
	}
	return nil
}

// postgresLedger is a ledger in the payments table, shared by every worker.
type postgresLedger struct {
	pool     *pgxpool.Pool
	provider *pgxpool.Pool // the external tallies' connections
	inTx     bool          // payments are written through the request's transaction
}

// Create inserts the payment unless ref has one, and returns ref's payment.
func (l *postgresLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	db, err := l.db(ctx)
	if err == nil {
		_, err = db.Exec(ctx, `INSERT INTO payments (id, account, amount, currency, ref) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (ref) DO NOTHING`, p.ID, account, p.Amount, p.Currency, ref)
	}
	if err == nil { // the row of ref, this one or the one recorded before
		err = db.QueryRow(ctx, `SELECT id, amount, currency FROM payments WHERE ref = $1`, ref).Scan(&p.ID, &p.Amount, &p.Currency)
	}
	if err != nil {
		return payment{}, fmt.Errorf("recording payment: %w", err)
	}
	return p, nil
}

// Count builds its statement from t's name, one of the tallies above, never
// from input.
func (l *postgresLedger) Count(ctx context.Context, t tally, id string) (int, error) {
	var count int
	db, err := l.db(ctx)
	if t.external {
		db, err = l.provider, nil
	}
	if err == nil {
		err = db.QueryRow(ctx, `INSERT INTO `+t.name+` (id, count) VALUES ($1, 1)
ON CONFLICT (id) DO UPDATE SET count = `+t.name+`.count + 1 RETURNING count`, id).Scan(&count)
	}
	if err != nil {
		return 0, fmt.Errorf("counting in %s: %w", t.name, err)
	}
	return count, nil
}

func (l *postgresLedger) Counts(ctx context.Context, t tally) ([]eventCount, error) {
	rows, err := l.pool.Query(ctx, `SELECT id, count FROM `+t.name+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.name, err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[eventCount])
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.name, err)
	}
	return append([]eventCount{}, counts...), nil // [] for none
}

// db returns what the ledger writes through: in transactional mode the
// request's transaction (see pgstore.Tx), so that a write commits only with
// the request's idempotency record, and a request without one (which did
// not pass the middleware) is refused: its write would be unprotected.
// Otherwise the pool.
func (l *postgresLedger) db(ctx context.Context) (interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, error,
) {
	if !l.inTx {
		return l.pool, nil
	}
	tx, ok := pgstore.Tx(ctx)
	if !ok {
		return nil, errors.New("the request holds no idempotency transaction")
	}
	return tx, nil
}

func (l *postgresLedger) List(ctx context.Context, account string) ([]payment, error) {
	rows, err := l.pool.Query(ctx, `SELECT id, amount, currency FROM payments WHERE account = $1 ORDER BY created_at, id`, account)
	if err != nil {
		return nil, fmt.Errorf("listing payments: %w", err)
	}
	payments, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (payment, error) {
		var p payment
		err := row.Scan(&p.ID, &p.Amount, &p.Currency)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing payments: %w", err)
	}
	return payments, nil
}
