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
	ending             // an owner's complete or release, or its transaction's begin
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

// errOwnerWaiting is an attempt of a claim or a sweep that stood back for
// an owner's write (see gate).
var errOwnerWaiting = fmt.Errorf("an owner's write waits for the file (%w)", ErrBusy)

// write runs statement, a writing statement of kind k, in the store's turn:
// an owner's as ownerWrite does, the others' as otherWrite.
func (s *Store) write(ctx context.Context, op string, k kind, statement func(conn *sql.Conn) error) error {
	if k == other {
		return s.otherWrite(ctx, op, func(conn *sql.Conn) error {
			if s.openGate(ctx, conn).ownerWaiting() {
				return errOwnerWaiting
			}
			return statement(conn)
		})
	}
	return s.inTurn(ctx, op, k, func(conn *sql.Conn) error {
		return s.ownerWrite(ctx, op, conn, k, statement)
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

// ownerWrite runs statement, an owner's writing statement of kind k, on
// conn, and returns its error wrapped for op. SQLite's own wait for a
// locked file sleeps longer on each try, so that a waiter often sleeps
// through the moment the lock is freed and another process's next
// statement takes it: the statement runs with no busy timeout instead, and
// is tried again every ownerRetry, the process marked as waiting in the
// gate, until it finds the file unlocked or ctx ends. It gives up (ErrBusy)
// only once no other connection has committed to the file for the busy
// timeout: an owner queued behind other writers that make progress waits
// its turn, as a failure would lose its request's work.
func (s *Store) ownerWrite(ctx context.Context, op string, conn *sql.Conn, k kind, statement func(conn *sql.Conn) error) error {
	return s.noBusyTimeout(ctx, op, conn, k, func(busyTimeout time.Duration) error {
		var (
			gate     *gate
			version  int64
			progress time.Time // the last commit of another connection seen
		)
		for {
			err := statement(conn)
			if err == nil || !errors.Is(classify(err), ErrBusy) {
				return wrapped(op, err)
			}
			if gate == nil {
				gate = s.openGate(ctx, conn)
				gate.enter()
				defer gate.leave()
			}
			var now int64
			if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&now); err != nil {
				return wrap(op, err)
			}
			if now != version || progress.IsZero() {
				version, progress = now, time.Now()
			}
			if time.Since(progress) >= busyTimeout {
				return wrap(op, err)
			}
			select {
			case <-time.After(ownerRetry):
			case <-ctx.Done():
				return wrap(op, ctx.Err())
			}
		}
	})
}

// otherWrite runs attempt, a claim's or a sweep's, each time in the store's
// turn on a connection with no busy timeout, and returns its error wrapped
// for op. While the file is locked, or an owner waits for it (attempt's
// errOwnerWaiting), it gives the turn to the process's owners and tries
// again every otherRetry, until ctx ends or the busy timeout has passed
// (ErrBusy).
func (s *Store) otherWrite(ctx context.Context, op string, attempt func(conn *sql.Conn) error) error {
	var giveUp time.Time
	for {
		err := s.inTurn(ctx, op, other, func(conn *sql.Conn) error {
			return s.noBusyTimeout(ctx, op, conn, other, func(busyTimeout time.Duration) error {
				if giveUp.IsZero() {
					giveUp = time.Now().Add(busyTimeout)
				}
				return wrapped(op, attempt(conn))
			})
		})
		if err == nil || !errors.Is(classify(err), ErrBusy) || !time.Now().Before(giveUp) {
			return err
		}
		select {
		case <-time.After(otherRetry):
		case <-ctx.Done():
			return wrap(op, ctx.Err())
		}
	}
}

// noBusyTimeout runs f, given conn's busy timeout, with that timeout set to
// 0 on conn, and for a renewal, synchronous at NORMAL; it then sets them
// back. f's error is returned as it is, the pragmas' wrapped for op.
func (s *Store) noBusyTimeout(ctx context.Context, op string, conn *sql.Conn, k kind, f func(busyTimeout time.Duration) error) error {
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
	return f(time.Duration(busyTimeout) * time.Millisecond)
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
