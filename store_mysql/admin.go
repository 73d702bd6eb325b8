package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

const (
	inspectSQL = "SELECT state, fingerprint, fence, status, header, body," +
		" IF(held = 1, 0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)), " + liveSQL + ", steps" +
		" FROM `idempotency_keys` WHERE `key` = ?"

	// lockForDeleteSQL locks a row and reads whether it is live, and a
	// live lease.
	lockForDeleteSQL = "SELECT " + liveSQL + ", state = 1 AND " + liveSQL +
		" FROM `idempotency_keys` WHERE `key` = ? FOR UPDATE"

	deleteSQL = "DELETE FROM `idempotency_keys` WHERE `key` = ?"

	// forceReleaseSQL frees a record in flight as Release does, keeping the
	// row so the next claim is fenced above the owner still running, whose
	// complete, or transaction's commit, then finds its token gone.
	forceReleaseSQL = "UPDATE `idempotency_keys` SET token = '', held = 0, expires_at = UTC_TIMESTAMP(6) WHERE `key` = ?"

	findSQL = "SELECT LOWER(HEX(`key`)) FROM `idempotency_keys` WHERE `key` BETWEEN ? AND ? AND " + liveSQL + " LIMIT ?"
)

// Inspect implements store.Admin.
func (s *Store) Inspect(ctx context.Context, hash string) (store.Record, bool, error) {
	row, err := hashKey(hash)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: inspect: %w", err)
	}
	var r claimRow
	err = s.db.QueryRowContext(ctx, s.sql.rewrite.Replace(inspectSQL), row).
		Scan(&r.state, &r.fingerprint, &r.fence, &r.status, &r.header, &r.body, &r.ttl, &r.live, &r.steps)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !r.live {
		return store.Record{}, false, nil
	}
	var rec store.Record
	if err == nil {
		rec, err = r.record("")
	}
	if err == nil {
		rec.Steps, err = stepcodec.Decode(r.steps)
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: inspect: %w", explain(err))
	}
	return rec, true, nil
}

// Delete implements store.Admin. An expired record is left alone and
// reported as none; a forced delete of one in flight releases it.
func (s *Store) Delete(ctx context.Context, hash string, force bool) (bool, error) {
	row, err := hashKey(hash)
	if err != nil {
		return false, fmt.Errorf("mysqlstore: delete: %w", err)
	}
	var deleted bool
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var live, leased bool
		err := tx.QueryRowContext(ctx, s.sql.rewrite.Replace(lockForDeleteSQL), row).Scan(&live, &leased)
		if errors.Is(err, sql.ErrNoRows) || err == nil && !live {
			return nil // an expired row is left to the next claim's takeover, which keeps its fence
		}
		if err != nil {
			return err
		}
		statement := deleteSQL
		switch {
		case leased && !force:
			return store.ErrLeaseLive
		case leased:
			statement = forceReleaseSQL
		}
		_, err = tx.ExecContext(ctx, s.sql.rewrite.Replace(statement), row)
		deleted = err == nil
		return err
	})
	if errors.Is(err, store.ErrLeaseLive) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("mysqlstore: delete: %w", explain(err))
	}
	return deleted, nil
}

// Find implements store.Admin.
func (s *Store) Find(ctx context.Context, prefix string, limit int) ([]string, error) {
	if err := store.CheckHash(prefix, true); err != nil {
		return nil, fmt.Errorf("mysqlstore: find: %w", err)
	}
	if limit < 1 {
		return nil, nil
	}
	lo, _ := hex.DecodeString(prefix + strings.Repeat("0", 64-len(prefix)))
	hi, _ := hex.DecodeString(prefix + strings.Repeat("f", 64-len(prefix)))
	rows, err := s.db.QueryContext(ctx, s.sql.rewrite.Replace(findSQL), lo, hi, limit)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: find: %w", explain(err))
	}
	defer rows.Close()
	var hashes []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("mysqlstore: find: %w", explain(err))
		}
		hashes = append(hashes, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlstore: find: %w", explain(err))
	}
	return hashes, nil
}

// Ping implements store.Pinger with the protocol's ping.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("mysqlstore: ping: %w", explain(err))
	}
	return nil
}

// hashKey is the key column's value for a store.HashKey.
func hashKey(hash string) ([]byte, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return nil, err
	}
	return hex.DecodeString(hash)
}

// inTx runs f in a read committed transaction, committed if f returns nil.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
