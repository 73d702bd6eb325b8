package sqlitestore

import (
	"context"
	"errors"
	"time"

	"github.com/seed43327c4c/idempotency/store/sweeper"
)

// deleteExpiredSQL deletes up to ?1 rows done ?3 ms (the tombstones'
// time) past their retention or in flight ?2 ms past their lease. It finds
// them by the index on sweep_at, never later than expires_at (a takeover
// moves expires_at alone), and judges expires_at in the same statement,
// so a row taken over stays.
var deleteExpiredSQL = onSQLiteClock(`
DELETE FROM idempotency_keys WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE sweep_at <= NOW AND expires_at <= NOW - iif(state = 1, ?2, ?3)
    LIMIT ?1)`)

// buryExpiredSQL turns up to ?1 rows done past their retention into
// tombstones: it drops their response and sets their sweep_at to the
// tombstone's end, ?2 ms later, for deleteExpiredSQL.
var buryExpiredSQL = onSQLiteClock(`
UPDATE idempotency_keys SET header = NULL, body = NULL, sweep_at = expires_at + ?2
WHERE key IN (
    SELECT key FROM idempotency_keys
    WHERE sweep_at <= NOW AND expires_at <= NOW AND state <> 1 AND sweep_at < expires_at + ?2
    LIMIT ?1)`)

// DefaultSweepInterval is the sweeper's interval when StartSweeper is
// given 0.
const DefaultSweepInterval = time.Minute

// sweepBatch is the sweeper's batch: small, so that its write lock delays
// claims little.
const sweepBatch = 1000

// DeleteExpired removes up to batch expired rows, in-flight ones after
// the abandoned retention, and with WithTombstones, turns done ones into
// tombstones first and removes those once their time ends; it returns how
// many rows it removed or turned, fewer than batch meaning none are left. Processes may run it at once. A batch below 1 is an error.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("sqlitestore: DeleteExpired expects batch >= 1")
	}
	var buried int64
	if s.tombs > 0 {
		n, err := s.exec(ctx, "bury expired", other, buryExpiredSQL, batch, s.tombs.Milliseconds())
		if err != nil || n == int64(batch) {
			return int(n), err
		}
		buried = n
	}
	n, err := s.exec(ctx, "delete expired", other, deleteExpiredSQL, batch-int(buried), s.abandoned.Milliseconds(), s.tombs.Milliseconds())
	return int(buried + n), err
}

// StartSweeper runs DeleteExpired in batches at once and then every
// interval (0 means DefaultSweepInterval; negative panics) until ctx is
// done, and returns a channel closed when it stops. Errors are logged
// (see WithLogger). Every process may run its own.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	return sweeper.Start(ctx, "sqlitestore", interval, DefaultSweepInterval, s.sweep)
}

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
