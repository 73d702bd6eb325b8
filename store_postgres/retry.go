package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// retry runs op again while it fails in one of the two ways that leave a
// statement of this store free to run again; any other error is returned.
//   - A dead connection (at most the pool's size times): the statement
//     almost surely did not run, and running it again is harmless if it
//     did: a Claim that won reports it claimed again, a Complete finds its
//     own completion and succeeds, a Release reports store.ErrNotOwner, a
//     Renew extends once more.
//   - A serialization failure (at most staleAttempts times): the server
//     aborted the statement, which changed nothing.
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

// deadConn reports whether err means the statement met a dead connection.
func deadConn(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", // admin_shutdown: pg_terminate_backend, fast shutdown
			"57P02", // crash_shutdown
			"57P05": // idle_session_timeout
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// serializationFailure reports whether err is SQLSTATE 40001.
func serializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}
