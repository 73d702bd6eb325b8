package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
)

// Migrate creates the store's table and index (schema.sql) if they do not
// exist yet, and otherwise changes nothing. It runs in one transaction
// begun with BEGIN IMMEDIATE, which takes the file's write lock first, so
// any number of processes may call it at start-up at once: one creates the
// table, the others wait for it (within the busy timeout) and find it
// there.
func (s *Store) Migrate(ctx context.Context) error {
	return inImmediateTx(ctx, s.db, "migrate", func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, schemaSQL)
		return err
	})
}

// inImmediateTx runs f on one connection of db inside a transaction begun
// with BEGIN IMMEDIATE, and commits it if f succeeds. A deferred
// transaction that reads and then writes can fail at its first write
// without waiting when another connection wrote meanwhile; one that takes
// the write lock first waits for it instead, within the busy timeout.
// Errors are wrapped for op (see wrap).
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

// onWriteLock runs f on one connection of db once it has begun a
// transaction on it with BEGIN IMMEDIATE, which waits for the file's write
// lock within the busy timeout; f ends the transaction. Errors are wrapped
// for op (see wrap).
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

// rollback ends conn's transaction. If that fails, conn is discarded
// rather than handed back to the pool with a transaction still open.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
