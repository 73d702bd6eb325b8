package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Migrate brings the table to the schema version this package uses: it
// creates the table (schema.sql) if it does not exist, applies in order the
// migrations a table of an earlier version lacks, and otherwise changes
// nothing. It runs in one transaction holding an advisory lock, so any
// number of workers may call it at start-up at once. Creating the table
// needs the CREATE privilege on the schema, which must exist; a current
// table needs no privilege beyond connecting. Until the table is current,
// Claim and BeginClaim refuse to claim on it.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLockSQL); err != nil {
			return err
		}
		version, err := s.version(ctx, tx)
		if err != nil {
			return err
		}
		for _, sql := range s.sql.migrations[version:] {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.name, err)
	}
	return nil
}

// migrateLockSQL takes the lock every Migrate holds: one for the whole
// database, not one a table, since one table has several names (with its
// schema or without, through each connection's search_path).
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('pgstore migrate', 0))`

// versionSQL tells whether the table $1 exists, and its comment.
const versionSQL = `SELECT to_regclass($1) IS NOT NULL, coalesce(obj_description(to_regclass($1), 'pg_class'), '')`

// versionComment prefixes the schema version in the table's comment.
const versionComment = "pgstore schema version "

// version returns the table's schema version, 0 if it does not exist. A
// table without a version, or with one later than this package's, is an
// error: Migrate cannot tell what it holds.
func (s *Store) version(ctx context.Context, db querier) (int, error) {
	var exists bool
	var comment string
	if err := db.QueryRow(ctx, versionSQL, s.name).Scan(&exists, &comment); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	digits, ok := strings.CutPrefix(comment, versionComment)
	version, err := strconv.Atoi(digits)
	if !ok || err != nil || version < 1 {
		return 0, fmt.Errorf("the table's comment %q records no schema version", comment)
	}
	if version > len(s.sql.migrations) {
		return 0, fmt.Errorf("schema version %d is later than this package's %d", version, len(s.sql.migrations))
	}
	return version, nil
}

// requireCurrent returns nil once the table has this package's schema
// version, and an error before. The answer is asked of the database until
// it is yes, then kept.
func (s *Store) requireCurrent(ctx context.Context) error {
	if s.current.Load() {
		return nil
	}
	var version int
	if err := s.retry(ctx, func() (err error) { version, err = s.version(ctx, s.pool); return err }); err != nil {
		return err
	}
	if version != len(s.sql.migrations) {
		return fmt.Errorf("%s is at schema version %d, not %d: run Migrate", s.name, version, len(s.sql.migrations))
	}
	s.current.Store(true)
	return nil
}
