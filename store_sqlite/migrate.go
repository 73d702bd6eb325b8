package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// Migrate creates the store's table and index (schema.sql) if they are
// missing, and adds the steps and completed_at columns (migration2.sql)
// to a table made without them. Any number of processes may call it at once: one migrates,
// the others wait for it within the busy timeout and find nothing to do.
func (s *Store) Migrate(ctx context.Context) error {
	return inImmediateTx(ctx, s.db, "migrate", func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, schemaSQL); err != nil {
			return err
		}
		var hasSteps bool
		err := conn.QueryRowContext(ctx,
			`SELECT count(*) > 0 FROM pragma_table_info('idempotency_keys') WHERE name = 'steps'`).Scan(&hasSteps)
		if err == nil && !hasSteps {
			_, err = conn.ExecContext(ctx, migration2SQL)
		}
		return err
	})
}

// inImmediateTx runs f in a transaction that takes the write lock first,
// committed if f succeeds: a deferred one that reads then writes would
// fail, not wait, if another connection wrote meanwhile.
func inImmediateTx(ctx context.Context, db *sql.DB, op string, f func(conn *sql.Conn) error) error {
	return onWriteLock(ctx, db, op, func(conn *sql.Conn) error {
		err := f(conn)
		if err == nil {
			_, err = conn.ExecContext(ctx, "COMMIT")
		}
		if err != nil {
			rollback(ctx, conn)
		}
		return err
	})
}

// onWriteLock runs f on a connection of db after BEGIN IMMEDIATE; f ends
// the transaction.
func onWriteLock(ctx context.Context, db *sql.DB, op string, f func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return wrap(op, err)
	}
	if err := f(conn); err != nil {
		return wrap(op, err)
	}
	return nil
}

// rollback ends conn's transaction, or discards conn if that fails.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
