package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Migrate creates the store's table (schema.sql) if it does not exist yet,
// upgrades a table an earlier version of this package created (upgrade.sql:
// the key column to 32 bytes, no expiry index), and otherwise changes
// nothing. It runs in one transaction holding a transaction-scoped advisory
// lock, one for every table, so any number of workers may call it at
// start-up at once, however each names the table: one creates or upgrades
// the table, rewriting every row in that transaction, and the others wait
// for it and find it current.
// Processes running an earlier version fail on an upgraded table (their
// keys are refused), so stop them before the upgrade.
//
// Creating the table needs the CREATE privilege on the schema, upgrading it
// the table's ownership; when the table is current, Migrate needs no
// privilege beyond connecting, so workers running as a less privileged role
// may call it too. The schema itself must already exist. Until the table is
// current, Claim and BeginClaim refuse to claim on it.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLockSQL); err != nil {
			return err
		}
		var exists, current bool
		if err := tx.QueryRow(ctx, tableStateSQL, s.name).Scan(&exists, &current); err != nil {
			return err
		}
		var err error
		switch {
		case !exists:
			_, err = tx.Exec(ctx, s.sql.schema)
		case !current:
			_, err = tx.Exec(ctx, s.sql.upgrade)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.name, err)
	}
	return nil
}

// migrateLockSQL takes the lock every Migrate holds: one for the whole
// database, not one a table, since one table has several names (with its
// schema or without, through each connection's search_path), and the
// migrations of different tables are rare enough to wait for each other.
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('pgstore migrate', 0))`

// tableStateSQL tells whether the table $1 exists, and whether it has
// today's schema (its key_is_sha256 check).
const tableStateSQL = `
SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT FROM pg_constraint WHERE conrelid = to_regclass($1) AND conname = 'key_is_sha256')`

// requireCurrent returns nil once the table has today's schema, and an
// error before: a claim on a table an earlier version made (its keys in
// hex, locked by other numbers) could miss a record that an earlier
// process holds, so nothing is claimed there until Migrate has upgraded
// it. The answer is asked of the database until it is yes, then kept.
func (s *Store) requireCurrent(ctx context.Context) error {
	if s.current.Load() {
		return nil
	}
	var exists, current bool
	if err := s.retry(ctx, func() error { return s.pool.QueryRow(ctx, tableStateSQL, s.name).Scan(&exists, &current) }); err != nil {
		return err
	}
	if !current {
		return fmt.Errorf("%s has no table of this version's schema (missing: %v): run Migrate", s.name, !exists)
	}
	s.current.Store(true)
	return nil
}
