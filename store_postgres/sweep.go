package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seed43327c4c/idempotency/store/sweeper"
)

// deleteExpiredSQL deletes up to $1 rows stored in pages $3 to $4 - 1 of
// the table that have expired on the database's clock: a done row whose
// retention has ended, or an in-flight row whose lease ended $2
// microseconds (the abandoned retention) ago or more. The table has no
// index on expires_at (see schema.sql), so the rows are found by reading
// those pages, a TID range scan. Rows another transaction has locked
// (another sweeper's batch, or a claim taking one over) are skipped, never
// waited for; a row taken over after this statement's snapshot is
// re-checked when locked and left alone.
const deleteExpiredSQL = `
WITH expired AS MATERIALIZED (
    SELECT key FROM idempotency_keys
    WHERE ctid >= format('(%s,0)', $3::bigint)::tid AND ctid < format('(%s,0)', $4::bigint)::tid
      AND expires_at <= statement_timestamp()
      AND (state <> 1 OR expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys AS t
USING expired
WHERE t.key = expired.key AND t.expires_at <= statement_timestamp()
  AND (t.state <> 1 OR t.expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')`

// pagesSQL is how many pages the table holds.
const pagesSQL = `SELECT pg_relation_size('idempotency_keys') / current_setting('block_size')::bigint`

// allPages is the end of the last page range: past every page a table can
// have.
const allPages = math.MaxUint32

// sweepPages is how many of the table's pages one range of a sweep reads:
// 1 MiB with the default page size, a few thousand records.
const sweepPages = 128

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
// fail. It reads the table from its first page until it has found batch
// rows, or to its end. A batch below 1 is an error and removes nothing.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("pgstore: DeleteExpired expects batch >= 1")
	}
	return s.deleteExpiredIn(ctx, batch, 0, allPages)
}

// deleteExpiredIn is DeleteExpired for the rows stored in pages from to
// to - 1.
func (s *Store) deleteExpiredIn(ctx context.Context, batch int, from, to int64) (int, error) {
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, s.pool, sweepTx, func(tx pgx.Tx) (err error) {
			tag, err = tx.Exec(ctx, s.sql.deleteExpired, batch, s.abandoned.Microseconds(), from, to)
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
// closed when the goroutine has stopped. Each round reads the table once,
// a range of pages at a time, deleting the expired rows of each range in
// batches of 1000, so one round clears any backlog. An interval of 0 means
// DefaultSweepInterval (one minute); a negative interval panics. Errors are logged with the store's logger (see
// WithLogger) and the next round tries again. Every worker may run its own
// sweeper on the same table: they skip each other's rows and never block.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	return sweeper.Start(ctx, "pgstore", interval, DefaultSweepInterval, s.sweep)
}

// sweep reads the table once, sweepPages pages at a time, deleting the
// expired rows of each range in batches until one comes back short, so a
// round costs one read of the table however many rows it removes. The last
// range is open-ended, taking in the pages added during the round. It stops
// at the first error, which it logs, or when ctx is done.
func (s *Store) sweep(ctx context.Context) {
	var pages int64
	err := s.retry(ctx, func() error { return s.pool.QueryRow(ctx, s.sql.pages).Scan(&pages) })
	for from := int64(0); err == nil && ctx.Err() == nil && from <= pages; from += sweepPages {
		to := from + sweepPages
		if to > pages {
			to = allPages
		}
		n := sweepBatch
		for err == nil && n == sweepBatch && ctx.Err() == nil {
			n, err = s.deleteExpiredIn(ctx, sweepBatch, from, to)
		}
	}
	if err != nil && ctx.Err() == nil {
		s.logger.ErrorContext(ctx, "pgstore: sweeping expired rows failed", "table", s.name, "err", err)
	}
}
