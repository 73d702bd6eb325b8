package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

// The administrator's statements, on row ?1. A row is live while its
// expires_at is ahead: a released row's is not.
var (
	inspectSQL = onSQLiteClock(`
SELECT state, fingerprint, fence, status, header, body, expires_at - NOW, steps
FROM idempotency_keys WHERE key = ?1 AND expires_at > NOW`)

	liveStateSQL  = onSQLiteClock(`SELECT state FROM idempotency_keys WHERE key = ?1 AND expires_at > NOW`)
	deleteDoneSQL = `DELETE FROM idempotency_keys WHERE key = ?1`
	// deleteInFlightSQL releases row ?1 as releaseSQL does, whoever holds
	// it.
	deleteInFlightSQL = onSQLiteClock(`
UPDATE idempotency_keys SET token = X'', expires_at = NOW, sweep_at = NOW WHERE key = ?1`)

	// findSQL lists up to ?3 live rows from ?1 to ?2.
	findSQL = onSQLiteClock(`
SELECT key FROM idempotency_keys WHERE key BETWEEN ?1 AND ?2 AND expires_at > NOW LIMIT ?3`)
)

var _ store.Admin = (*Store)(nil)

// Inspect implements store.Admin in one statement, in the store's turn.
func (s *Store) Inspect(ctx context.Context, hash string) (store.Record, bool, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return store.Record{}, false, fmt.Errorf("sqlitestore: inspect: %w", err)
	}
	var (
		state  int
		fp     []byte
		fence  int64
		status sql.NullInt64
		header []byte
		body   []byte
		ttl    int64
		steps  []byte
	)
	err := s.inTurn(ctx, "inspect", other, func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, inspectSQL, hash).Scan(&state, &fp, &fence, &status, &header, &body, &ttl, &steps)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return wrap("inspect", err)
		}
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, false, nil
	case err != nil:
		return store.Record{}, false, err
	}
	rec, err := rowRecord(state, fp, fence, status, header, body, ttl)
	if err == nil {
		rec.Steps, err = stepcodec.Decode(steps)
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("sqlitestore: inspect: %w", err)
	}
	return rec, true, nil
}

// Delete implements store.Admin in one transaction on the write lock. A
// row in flight is released instead, so that the next claim gets a higher
// fence; this Store's watchers of its key are woken.
func (s *Store) Delete(ctx context.Context, hash string, force bool) (bool, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return false, fmt.Errorf("sqlitestore: delete: %w", err)
	}
	var state int
	var refused bool
	err := inImmediateTx(ctx, s.db, "delete", func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, liveStateSQL, hash).Scan(&state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		case state != int(store.StateInFlight):
			_, err = conn.ExecContext(ctx, deleteDoneSQL, hash)
		case !force:
			refused = true // nothing written: the commit changes nothing
		default:
			_, err = conn.ExecContext(ctx, deleteInFlightSQL, hash)
		}
		return err
	})
	switch {
	case err != nil:
		return false, err
	case refused:
		return false, store.ErrLeaseLive
	case state == int(store.StateInFlight):
		s.watches.wakeRow(hash)
	}
	return state != 0, nil
}

// Find implements store.Admin with a range scan of the primary key.
func (s *Store) Find(ctx context.Context, prefix string, limit int) ([]string, error) {
	if err := store.CheckHash(prefix, true); err != nil {
		return nil, fmt.Errorf("sqlitestore: find: %w", err)
	}
	from, to := prefix+strings.Repeat("0", 64-len(prefix)), prefix+strings.Repeat("f", 64-len(prefix))
	var found []string
	err := s.inTurn(ctx, "find", other, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, findSQL, from, to, max(limit, 0))
		if err != nil {
			return wrap("find", err)
		}
		defer rows.Close()
		for rows.Next() {
			var hash string
			if err := rows.Scan(&hash); err != nil {
				return wrap("find", err)
			}
			found = append(found, hash)
		}
		if err := rows.Err(); err != nil {
			return wrap("find", err)
		}
		return nil
	})
	return found, err
}

// wakeRow wakes and forgets the watches of row.
func (w *watches) wakeRow(row string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys.Wake(row)
}
