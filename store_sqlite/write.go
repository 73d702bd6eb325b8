package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// kind decides how a statement waits (see write).
type kind int

const (
	other  kind = iota // a claim or a sweep
	ending             // an owner's complete or release
	// renewal is an owner's renewal, committed without a disk flush: a
	// power loss ends every lease anyway.
	renewal
)

// How soon a statement retries a file locked by another connection: an
// owner's sooner, so that across processes it takes the freed lock first.
const (
	ownerRetry = 100 * time.Microsecond
	otherRetry = time.Millisecond
)

// write runs statement on a connection of its own in the store's turn
// (inTurn), as writeOn runs it.
func (s *Store) write(ctx context.Context, op string, k kind, statement func(conn *sql.Conn) error) error {
	return s.inTurn(ctx, op, k, func(conn *sql.Conn) error {
		return s.writeOn(ctx, op, conn, k, statement)
	})
}

// inTurn runs f on a connection of its own when no other statement of this
// store is running (see turn), an owner's ahead of the others, and returns
// its error, or ctx's or the pool's wrapped for op.
func (s *Store) inTurn(ctx context.Context, op string, k kind, f func(conn *sql.Conn) error) error {
	if err := s.turn.take(ctx, k != other); err != nil {
		return wrap(op, err)
	}
	defer s.turn.give()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer conn.Close()
	return f(conn)
}

// writeOn runs statement, a writing statement of kind k, on conn, and
// returns its error wrapped for op. SQLite's own wait for a locked file
// sleeps longer on each try, so that a waiter often sleeps through the
// moment the lock is freed and another process's next statement takes it:
// the statement runs with no busy timeout instead, and is tried again
// every ownerRetry or otherRetry until it finds the file unlocked, ctx
// ends, or the connection's busy timeout has passed (ErrBusy).
func (s *Store) writeOn(ctx context.Context, op string, conn *sql.Conn, k kind, statement func(conn *sql.Conn) error) error {
	var busyTimeout, synchronous int64
	if err := conn.QueryRowContext(ctx, "SELECT (SELECT * FROM pragma_busy_timeout), (SELECT * FROM pragma_synchronous)").
		Scan(&busyTimeout, &synchronous); err != nil {
		return wrap(op, err)
	}
	var err error
	if k == renewal && synchronous > 1 { // above NORMAL
		err = set(ctx, conn, "synchronous", 1)
		defer restore(conn, "synchronous", synchronous)
	}
	if err == nil {
		err = set(ctx, conn, "busy_timeout", 0)
		defer restore(conn, "busy_timeout", busyTimeout)
	}
	if err != nil {
		return wrap(op, err)
	}
	retry := ownerRetry
	if k == other {
		retry = otherRetry
	}
	giveUp := time.Now().Add(time.Duration(busyTimeout) * time.Millisecond)
	for {
		err := statement(conn)
		if err == nil {
			return nil
		}
		if !errors.Is(classify(err), ErrBusy) || !time.Now().Before(giveUp) {
			return wrap(op, err)
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return wrap(op, ctx.Err())
		}
	}
}

func set(ctx context.Context, conn *sql.Conn, pragma string, value int64) error {
	_, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA %s = %d", pragma, value))
	return err
}

// restore sets conn's pragma back to value, or discards conn if that
// fails, so that the pool never hands out a changed connection.
func restore(conn *sql.Conn, pragma string, value int64) {
	if err := set(context.Background(), conn, pragma, value); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
