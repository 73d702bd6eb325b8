package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/store/sweeper"
)

// expiredSQL locks up to ? expired rows, skipping rows others have locked:
// done rows whose retention ended ? microseconds (the tombstone time) ago
// or more, in-flight rows whose lease ended ? microseconds ago or more and
// that no transaction holds. A locking read sees each row's latest
// version, which stays as read until the batch's transaction ends.
const expiredSQL = "SELECT `key` FROM `idempotency_keys` FORCE INDEX (`idempotency_keys_expires_at`)" +
	" WHERE expires_at <= UTC_TIMESTAMP(6)" +
	" AND (state = 1 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)" +
	" AND (state <> 1 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)" +
	" AND NOT " + liveSQL +
	" LIMIT ? FOR UPDATE SKIP LOCKED"

// entombSQL drops the response of up to ? done rows past their retention,
// which WithTombstones keeps as tombstones: only the claim's fields stay.
const entombSQL = "UPDATE `idempotency_keys` SET status = NULL, header = NULL, body = NULL" +
	" WHERE expires_at <= UTC_TIMESTAMP(6) AND state <> 1 AND held = 0 AND body IS NOT NULL LIMIT ?"

// DefaultSweepInterval is StartSweeper's interval when given 0.
const DefaultSweepInterval = time.Minute

const sweepBatch = 1000

// DeleteExpired removes up to batch (at least 1) expired rows and returns
// how many; fewer means none were left that it could lock. In-flight rows
// are kept for the abandoned retention. With WithTombstones, done rows are
// kept for the tombstone time, and it also drops the responses of up to
// batch of them whose retention ended, counted in what it returns.
// Callers running it at once skip each other's rows, and none waits.
func (s *Store) DeleteExpired(ctx context.Context, batch int) (int, error) {
	if batch < 1 {
		return 0, errors.New("mysqlstore: DeleteExpired expects batch >= 1")
	}
	if err := s.claims.take(ctx); err != nil {
		return 0, fmt.Errorf("mysqlstore: delete expired: %w", err)
	}
	defer s.claims.give()
	var (
		n   int
		err error
	)
	for attempt := range staleAttempts {
		n, err = s.deleteExpired(ctx, batch)
		if !isDeadlock(err) {
			break
		}
		// Sweepers that deadlocked once would meet again if they all ran
		// again at once: each waits a random while, longer every time.
		select {
		case <-ctx.Done():
		case <-time.After(rand.N(time.Duration(attempt+1) * 10 * time.Millisecond)):
		}
	}
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: delete expired: %w", explain(err))
	}
	return n, nil
}

// deleteExpired runs one batch in a transaction. Sweepers racing on one
// table can deadlock on the index entries of the rows they delete; the
// server then rolls one batch back, which runs again after a random pause.
func (s *Store) deleteExpired(ctx context.Context, batch int) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		n = 0 // a batch run again after a deadlock counts afresh
		if s.tombstones > 0 {
			res, err := tx.ExecContext(ctx, s.sql.rewrite.Replace(entombSQL), batch)
			if err != nil {
				return err
			}
			entombed, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n = int(entombed)
		}
		keys, err := s.lockExpired(ctx, tx, batch)
		if err != nil || len(keys) == 0 {
			return err
		}
		query := s.sql.rewrite.Replace("DELETE FROM `idempotency_keys` WHERE `key` IN (?" +
			strings.Repeat(", ?", len(keys)-1) + ")")
		res, err := tx.ExecContext(ctx, query, keys...)
		if err != nil {
			return err
		}
		deleted, err := res.RowsAffected()
		n += int(deleted)
		return err
	})
	return n, err
}

// lockExpired locks and returns the keys of up to batch expired rows.
func (s *Store) lockExpired(ctx context.Context, tx *sql.Tx, batch int) ([]any, error) {
	rows, err := tx.QueryContext(ctx, s.sql.rewrite.Replace(expiredSQL), s.tombstones.Microseconds(), s.abandoned.Microseconds(), batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var key []byte
		if err := rows.Scan(&key); err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, rows.Err()
}

// StartSweeper removes expired rows at once and then every interval (0
// means DefaultSweepInterval) until ctx is done, in batches until one
// comes back short; the channel returned is closed when it has stopped.
// Errors are logged. Every worker may run its own sweeper on the same
// table.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) <-chan struct{} {
	return sweeper.Start(ctx, "mysqlstore", interval, DefaultSweepInterval, s.sweep)
}

func (s *Store) sweep(ctx context.Context) {
	n, err := sweepBatch, error(nil)
	for err == nil && n >= sweepBatch && ctx.Err() == nil {
		n, err = s.DeleteExpired(ctx, sweepBatch)
	}
	if err != nil && ctx.Err() == nil {
		s.logger.ErrorContext(ctx, "mysqlstore: sweeping expired rows failed", "table", s.table, "err", err)
	}
}
