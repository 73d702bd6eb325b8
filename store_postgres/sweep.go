package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// deleteExpiredSQL deletes up to $1 rows whose lease or retention has ended
// on the database's clock. Rows another transaction has locked (another
// sweeper's batch, or a claim taking one over) are skipped, never waited
// for; a row taken over after this statement's snapshot is re-checked when
// locked and left alone.
const deleteExpiredSQL = `
WITH expired AS MATERIALIZED (
    SELECT key FROM idempotency_keys
    WHERE expires_at <= statement_timestamp()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys AS t
USING expired
WHERE t.key = expired.key AND t.expires_at <= statement_timestamp()`

// DefaultSweepInterval is how often the sweeper started by StartSweeper
// runs when it is given an interval of 0.
const DefaultSweepInterval = time.Minute

// sweepBatch is how many rows one DeleteExpired call of the sweeper removes.
const sweepBatch = 1000

// DeleteExpired removes up to batch rows whose lease or retention has
// ended on the database's clock and returns how many it removed; fewer
// than batch means none were left that it could lock. An in-flight row
// whose lease lapsed is removed too, which frees its key as a takeover
// would. Any number of callers, in any number of processes, may run it at
// once on one table: each skips the rows the others hold and none waits.
// A batch below 1 is an error and removes nothing.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("pgstore: DeleteExpired expects batch >= 1")
	}
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() (err error) {
		tag, err = s.db.Exec(ctx, s.sql.deleteExpired, batch)
		return err
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
