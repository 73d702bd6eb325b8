package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store/sweeper"
)

// deleteExpiredSQL sweeps up to $1 expired rows stored in pages $3 to
// $4 - 1 (a TID range scan: expires_at has no index): done rows past their
// retention, in-flight rows whose lease ended $2 microseconds ago or more.
// A done row still within its tombstone time (rowEndSQL) is turned into
// its tombstone, its response and token dropped and its expiry moved to its end;
// the others are deleted. Rows another transaction has locked are skipped,
// never waited for; a row taken over after the snapshot is re-checked when
// locked and left alone. It returns how many rows it swept.
const deleteExpiredSQL = `
WITH expired AS MATERIALIZED (
    SELECT t.key, t.state IN (2, 3) AND ` + rowEndSQL + ` > statement_timestamp() AS entomb
    FROM idempotency_keys AS t
    WHERE ctid >= format('(%s,0)', $3::bigint)::tid AND ctid < format('(%s,0)', $4::bigint)::tid
      AND expires_at <= statement_timestamp()
      AND (state <> 1 OR expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), entombed AS (
    UPDATE idempotency_keys AS t
    SET state = 4, token = '', status = NULL, header = NULL, body = NULL, expires_at = ` + rowEndSQL + `
    FROM expired
    WHERE t.key = expired.key AND expired.entomb AND t.state IN (2, 3) AND t.expires_at <= statement_timestamp()
    RETURNING 1
), deleted AS (
    DELETE FROM idempotency_keys AS t
    USING expired
    WHERE t.key = expired.key AND NOT expired.entomb AND t.expires_at <= statement_timestamp()
      AND (t.state <> 1 OR t.expires_at <= statement_timestamp() - $2::bigint * interval '1 microsecond')
    RETURNING 1
)
SELECT (SELECT count(*) FROM entombed) + (SELECT count(*) FROM deleted)`

const pagesSQL = `SELECT pg_relation_size('idempotency_keys') / current_setting('block_size')::bigint`

const allPages = math.MaxUint32

const sweepPages = 128

// DefaultSweepInterval is StartSweeper's interval when given 0.
const DefaultSweepInterval = time.Minute

const sweepBatch = 1000

// sweepTx is read committed whatever the default isolation level: its
// DELETE re-checks each row it locks against the latest committed version,
// and run serializable it would make a claim taking over a row it deletes
// fail at COMMIT.
var sweepTx = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// DeleteExpired removes up to batch (at least 1) expired rows and returns
// how many; fewer means none were left that it could lock. In-flight rows
// are kept for the abandoned retention; done rows become tombstones when
// the store keeps them (WithTombstones), and count as removed. Callers running it at once skip
// each other's rows, and none waits.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("pgstore: DeleteExpired expects batch >= 1")
	}
	return s.deleteExpiredIn(ctx, batch, 0, allPages)
}

func (s *Store) deleteExpiredIn(ctx context.Context, batch int, from, to int64) (int, error) {
	var n int64
	err := s.retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, s.pool, sweepTx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, s.sql.deleteExpired, batch, s.abandoned.Microseconds(), from, to).Scan(&n)
		})
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete expired: %w", err)
	}
	return int(n), nil
}

// StartSweeper removes expired rows at once and then every interval (0
// means DefaultSweepInterval) until ctx is done; the channel returned is
// closed when it has stopped. Each round reads the whole table. Errors are
// logged. Every worker may run its own sweeper on the same table.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	return sweeper.Start(ctx, "pgstore", interval, DefaultSweepInterval, s.sweep)
}

// sweep reads the table once, a range of pages at a time, deleting in
// batches until one comes back short. The last range is open-ended, taking
// in the pages added during the round. It stops at the first error.
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
