package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"time"
)

// How soon a statement of the store that found the file locked by another
// connection tries again: an owner's statement sooner than the others, so
// that across processes too it takes the lock first when it is freed.
const (
	ownerRetry = 100 * time.Microsecond
	otherRetry = time.Millisecond
)

// write runs statement, one of the store's statements, on a connection of
// its own, when no other statement of this store is running (see turn),
// ahead of the others if owner is true, and returns its error wrapped for
// op. SQLite's own wait for a locked file sleeps longer on each try, so
// that a waiter often sleeps through the moment the lock is freed and
// another process's next statement takes it: the statement runs with no
// busy timeout instead, and is tried again every ownerRetry or otherRetry
// until it finds the file unlocked, ctx ends, or the database's busy
// timeout has passed (ErrBusy).
func (s *Store) write(ctx context.Context, op string, owner bool, statement func(conn *sql.Conn) error) error {
	if err := s.turn.take(ctx, owner); err != nil {
		return wrap(op, err)
	}
	defer s.turn.give()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer conn.Close()
	var busyTimeout int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyTimeout); err != nil {
		return wrap(op, err)
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return wrap(op, err)
	}
	defer restoreBusyTimeout(conn, busyTimeout)
	retry := otherRetry
	if owner {
		retry = ownerRetry
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

// restoreBusyTimeout sets conn's busy timeout back to ms milliseconds, or
// discards conn if that fails, so that the pool never hands out a
// connection without it.
func restoreBusyTimeout(conn *sql.Conn, ms int64) {
	if _, err := conn.ExecContext(context.Background(), "PRAGMA busy_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
