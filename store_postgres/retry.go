package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// retry runs op, and runs it again while it fails in one of the two ways
// that leave a statement of this store free to run again:
//
//   - On a connection that was dead: the server terminated it
//     (pg_terminate_backend, a restart or a failover, or its
//     idle_session_timeout) or pgx sent nothing on it. Such a statement
//     almost surely did not run, and running it again is harmless even if
//     it did: a Claim that had won finds the key in flight under its own
//     token and reports it claimed again, a Complete that had succeeded
//     finds the row completed under its own lease and succeeds, a Release
//     that had succeeded reports store.ErrNotOwner, a Renew extends the
//     lease once more, and DeleteExpired deletes what is left. Each failure discards
//     one dead connection, so op runs again at most as many times as the
//     pool holds connections.
//   - With a serialization failure (see serializationFailure): under
//     repeatable read or serializable isolation the statement met a row
//     that another transaction changed after its snapshot, and the server
//     aborted it, so it changed nothing. Run again, it takes a fresh
//     snapshot. This happens once per concurrent commit on the same row,
//     so op runs again at most staleAttempts times for it.
//
// Any other error, or an ended ctx, is returned at once.
func (s *Store) retry(ctx context.Context, op func() error) error {
	deadRuns, staleRuns := 0, 0
	for {
		err := op()
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case deadConn(err) && deadRuns < s.maxConns:
			deadRuns++
		case serializationFailure(err) && staleRuns < staleAttempts:
			staleRuns++
		default:
			return err
		}
	}
}

// deadConn reports whether err means the statement met a dead connection
// and did not run.
func deadConn(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", // admin_shutdown: pg_terminate_backend, fast shutdown
			"57P02", // crash_shutdown
			"57P05": // idle_session_timeout ended the session before the statement came
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// serializationFailure reports whether err is the server's
// serialization_failure (SQLSTATE 40001): a statement under repeatable
// read or serializable isolation met a row that a transaction committed
// after its snapshot. It changed nothing and may run again.
func serializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}
