package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store"
)

// The administrator's statements, on key $1 (a row's key column) and $2
// its lockHash. A row is live until it ends (rowEndSQL): a released row's
// end has passed, a tombstone's has not.
const (
	// inspectSQL reads key $1's live row, reporting held false when an open
	// transaction holds the key's claim lock (its row cannot be seen).
	inspectSQL = `
SELECT g.held, coalesce(r.state, 0), r.fingerprint, coalesce(r.fence, 0), r.status, r.header, r.body,
       r.steps, r.completed_at, coalesce(r.ttl, 0)
FROM (SELECT pg_try_advisory_xact_lock_shared(` + claimLockSQL + `$2::bigint) AS held) AS g
LEFT JOIN (
    SELECT ` + rowStateSQL + ` AS state, t.fingerprint, t.fence, t.status, t.header, t.body, t.steps, t.completed_at,
           (extract(epoch FROM ` + rowEndSQL + ` - now.at) * 1000000)::bigint AS ttl
    FROM idempotency_keys AS t, (SELECT clock_timestamp() AS at) AS now
    WHERE t.key = $1 AND ` + rowEndSQL + ` > now.at
) AS r ON true`

	// deleteLockSQL, in Delete's transaction, takes key $1's claim lock
	// until it ends, if no other transaction holds it, and locks its live
	// row; it returns the row's state, 0 without one.
	deleteLockSQL = `
SELECT g.held, coalesce((SELECT t.state FROM idempotency_keys AS t
                         WHERE t.key = $1 AND ` + rowEndSQL + ` > statement_timestamp() AND g.held FOR UPDATE), 0)
FROM (SELECT pg_try_advisory_xact_lock(` + claimLockSQL + `$2::bigint) AS held) AS g`

	deleteDoneSQL = `DELETE FROM idempotency_keys WHERE key = $1`

	// deleteInFlightSQL releases key $1's row as releaseSQL does, whoever
	// holds it.
	deleteInFlightSQL = `
WITH done AS (
    UPDATE idempotency_keys
    SET token = '', expires_at = statement_timestamp()
    WHERE key = $1 AND state = 1
    RETURNING key
)` + wakeSQL

	// findSQL lists up to $3 live keys from $1 to $2, in hex.
	findSQL = `
SELECT encode(t.key, 'hex') FROM idempotency_keys AS t
WHERE t.key BETWEEN $1 AND $2 AND ` + rowEndSQL + ` > statement_timestamp()
LIMIT $3`
)

var _ store.Admin = (*Store)(nil)

// errHeldByTx is ErrLeaseLive for a key an open transaction holds.
var errHeldByTx = fmt.Errorf("%w: held by an open transaction, which a delete cannot end", store.ErrLeaseLive)

// Inspect implements store.Admin in one statement. A key held by an open
// transaction of a TxStore is reported in flight, with no fingerprint or
// fence and TTL 0, since its row cannot be seen. A record in flight comes
// with the steps recorded under it.
func (s *Store) Inspect(ctx context.Context, hash string) (store.Record, bool, error) {
	row, err := adminRow(hash)
	if err == nil {
		err = s.requireCurrent(ctx)
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: inspect: %w", err)
	}
	var (
		held bool
		r    claimRow
	)
	err = s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.inspect, row, lockHash(row)).
			Scan(&held, &r.state, &r.fingerprint, &r.fence, &r.status, &r.header, &r.body, &r.steps, &r.completed, &r.ttl)
	})
	switch {
	case err != nil:
		return store.Record{}, false, fmt.Errorf("pgstore: inspect: %w", err)
	case r.state == 0 && !held:
		return store.Record{State: store.StateInFlight}, true, nil
	case r.state == 0:
		return store.Record{}, false, nil
	}
	rec, err := r.record("")
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: inspect: %w", err)
	}
	return rec, true, nil
}

// Delete implements store.Admin in one transaction. A row in flight is
// released instead, so that the next claim gets a higher fence. A key an
// open transaction holds is refused, forced or not.
func (s *Store) Delete(ctx context.Context, hash string, force bool) (bool, error) {
	row, err := adminRow(hash)
	if err == nil {
		err = s.requireCurrent(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("pgstore: delete: %w", err)
	}
	var deleted bool
	err = s.retry(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
			deleted, err = s.deleteIn(ctx, tx, row, force)
			return err
		})
	})
	if err != nil && !errors.Is(err, store.ErrLeaseLive) {
		err = fmt.Errorf("pgstore: delete: %w", err)
	}
	return deleted, err
}

func (s *Store) deleteIn(ctx context.Context, tx pgx.Tx, row []byte, force bool) (bool, error) {
	var held bool
	var state int16
	if err := tx.QueryRow(ctx, s.sql.deleteLock, row, lockHash(row)).Scan(&held, &state); err != nil {
		return false, err
	}
	var err error
	switch {
	case !held:
		return false, errHeldByTx
	case state == 0:
		return false, nil
	case state != int16(store.StateInFlight):
		_, err = tx.Exec(ctx, s.sql.deleteDone, row)
	case !force:
		return false, store.ErrLeaseLive
	default:
		_, err = tx.Exec(ctx, s.sql.deleteInFlight, row)
	}
	return err == nil, err
}

// Find implements store.Admin with a range scan of the primary key.
func (s *Store) Find(ctx context.Context, prefix string, limit int) ([]string, error) {
	if err := store.CheckHash(prefix, true); err != nil {
		return nil, fmt.Errorf("pgstore: find: %w", err)
	}
	if err := s.requireCurrent(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: find: %w", err)
	}
	from, _ := hex.DecodeString(prefix + strings.Repeat("0", 64-len(prefix)))
	to, _ := hex.DecodeString(prefix + strings.Repeat("f", 64-len(prefix)))
	var found []string
	err := s.retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, s.sql.find, from, to, max(limit, 0))
		if err == nil {
			found, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: find: %w", err)
	}
	return found, nil
}

// adminRow returns the key column's value for hash.
func adminRow(hash string) ([]byte, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return nil, err
	}
	return hex.DecodeString(hash)
}
