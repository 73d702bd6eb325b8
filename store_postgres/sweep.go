package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// deleteExpiredSQL deletes up to $1 rows that have expired on the
// database's clock: a done row whose retention has ended, or an in-flight
// row whose lease ended $2 microseconds (the abandoned retention) ago or
// more. Rows another transaction has locked (another sweeper's batch, or a
// claim taking one over) are skipped, never waited for; a row taken over
// after this statement's snapshot is re-checked when locked and left
// alone. The first condition alone picks the rows by the expires_at index.
const deleteExpiredSQL = `
WITH expired AS MATERIALIZED (
    SELECT key FROM idempotency_keys
    WHERE expires_at <= statement_timestamp()
      AND (state <> 1 OR expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys AS t
USING expired
WHERE t.key = expired.key AND t.expires_at <= statement_timestamp()
  AND (t.state <> 1 OR t.expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')`

// DefaultSweepInterval is how often the sweeper started by StartSweeper
// runs when it is given an interval of 0.
const DefaultSweepInterval = time.Minute

// sweepBatch is how many rows one DeleteExpired call of the sweeper removes.
const sweepBatch = 1000

// sweepTx is the transaction DeleteExpired runs in: read committed,
// whatever the connections' default isolation level. Its DELETE re-checks
// each row it locks against the latest committed version, which is all it
// needs; run serializable, it would take part in the server's conflict
// detection, and a serializable claim taking over a row it deletes would
// be aborted at COMMIT.
var sweepTx = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// DeleteExpired removes up to batch expired rows and returns how many it
// removed; fewer than batch means none were left that it could lock. A done
// row is removed once its retention has ended on the database's clock. An
// in-flight row whose lease lapsed (its owner died) or was ended by a
// release is kept for the abandoned retention after that (see
// WithAbandonedRetention), so that a takeover gets a higher fencing number
// than the last owner's, and removed after it. Any number of callers, in any
// number of processes, may run it at once on one table: each skips the rows
// the others hold and none waits. It runs at read committed, whatever the
// default isolation level, so that it never makes a serializable claim
// fail. A batch below 1 is an error and removes nothing.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("pgstore: DeleteExpired expects batch >= 1")
	}
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, s.pool, sweepTx, func(tx pgx.Tx) (err error) {
			tag, err = tx.Exec(ctx, s.sql.deleteExpired, batch, s.abandoned.Microseconds())
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete expired: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// StartSweeper starts a goroutine that removes expired rows at once and
// then every interval, until ctx is done, and returns a channel that is
// closed when the goroutine has stopped. Each round calls DeleteExpired in
// batches of 1000 until a batch comes back short, so one round clears any
// backlog. An interval of 0 means DefaultSweepInterval (one minute); a
// negative interval panics. Errors are logged with the store's logger (see
// WithLogger) and the next round tries again. Every worker may run its own
// sweeper on the same table: they skip each other's rows and never block.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	if interval < 0 {
		panic("pgstore: StartSweeper expects interval >= 0")
	}
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			s.sweep(ctx)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return done
}

// sweep deletes batches until one comes back short or ctx is done.
func (s *Store) sweep(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := s.DeleteExpired(ctx, sweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.ErrorContext(ctx, "pgstore: sweeping expired rows failed", "table", s.name, "err", err)
			}
			return
		}
		if n < sweepBatch {
			return
		}
	}
}
