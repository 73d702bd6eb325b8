package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// retry runs op, and runs it again while it fails on a connection that
// was dead: the server terminated it (pg_terminate_backend, a restart or a
// failover) or pgx sent nothing on it. Such a statement almost surely did
// not run, and running it again is harmless even if it did: a Claim that
// had won reports the key in flight (the handler does not run and the key
// is free again after the lease), a Complete or Release that had succeeded
// reports store.ErrNotOwner, a Renew extends the lease once more, and
// DeleteExpired deletes what is left. Each failure discards one dead
// connection, so op runs at most once more than the pool holds
// connections.
func (s *Store) retry(ctx context.Context, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt > s.maxConns || !deadConn(err) || ctx.Err() != nil {
			return err
		}
	}
}

// deadConn reports whether err means the statement met a dead connection
// and did not run.
func deadConn(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// admin_shutdown (pg_terminate_backend, fast shutdown) and
		// crash_shutdown.
		return pgErr.Code == "57P01" || pgErr.Code == "57P02"
	}
	return pgconn.SafeToRetry(err)
}
