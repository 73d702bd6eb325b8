package sqlitestore

import (
	"context"
	"errors"
	"time"

	"github.com/seed43327c4c/idempotency/store/sweeper"
)

// deleteExpiredSQL deletes up to ?1 rows that have expired on SQLite's
// clock: a done row whose retention has ended, or an in-flight row whose
// lease ended ?2 milliseconds (the abandoned retention) ago or more. It is
// one statement, so a row taken over by a claim is either deleted before
// the claim (which then inserts it afresh) or judged after it (and then
// live, so kept).
//
// The rows are found by the index on sweep_at, which is expires_at as the
// last insert, renew, complete or release set it, never later than
// expires_at: a takeover moves expires_at alone (see claimSQL), so a row
// taken over is found early and kept by the conditions on expires_at.
var deleteExpiredSQL = onSQLiteClock(`
DELETE FROM idempotency_keys WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE sweep_at <= NOW AND expires_at <= NOW AND (state <> 1 OR expires_at <= NOW - ?2)
    LIMIT ?1)`)

// DefaultSweepInterval is how often the sweeper started by StartSweeper
// runs when it is given an interval of 0.
const DefaultSweepInterval = time.Minute

// sweepBatch is how many rows one DeleteExpired call of the sweeper
// removes: small enough that the write lock it holds delays claims very
// little.
const sweepBatch = 1000

// DeleteExpired removes up to batch expired rows and returns how many it
// removed; fewer than batch means none were left. A done row is removed
// once its retention has ended on SQLite's clock. An in-flight row whose
// lease lapsed (its owner died) or was ended by a release is kept for the
// abandoned retention after that (see WithAbandonedRetention), so that a
// takeover gets a higher fencing number than the last owner's, and
// removed after it. Any number of callers, in any number of processes, may
// run it at once: SQLite runs their batches one after another. A batch
// below 1 is an error and removes nothing.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("sqlitestore: DeleteExpired expects batch >= 1")
	}
	n, err := s.exec(ctx, "delete expired", other, deleteExpiredSQL, batch, s.abandoned.Milliseconds())
	return int(n), err
}

// StartSweeper starts a goroutine that removes expired rows at once and
// then every interval, until ctx is done, and returns a channel that is
// closed when the goroutine has stopped. Each round calls DeleteExpired in
// batches of 1000 until a batch comes back short, so one round clears any
// backlog. An interval of 0 means DefaultSweepInterval (one minute); a
// negative interval panics. Errors are logged with the store's logger (see
// WithLogger) and the next round tries again. Every process may run its
// own sweeper on the same file.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	return sweeper.Start(ctx, "sqlitestore", interval, DefaultSweepInterval, s.sweep)
}

// sweep deletes batches until one comes back short or ctx is done.
func (s *Store) sweep(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := s.DeleteExpired(ctx, sweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.ErrorContext(ctx, "sqlitestore: sweeping expired rows failed", "err", err)
			}
			return
		}
		if n < sweepBatch {
			return
		}
	}
}
