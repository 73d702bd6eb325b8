package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Migrate creates the table (schema.sql) if it does not exist and applies
// the migrations a table of an earlier schema version lacks. It runs in one
// transaction under an advisory lock, so any number of workers may call it
// at once. A current table needs no privilege beyond connecting. Until the
// table is current, Claim and BeginClaim refuse to claim on it.
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

// migrateLockSQL is one lock for the database, not one a table: a table
// has several names (with its schema or through the search_path).
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('pgstore migrate', 0))`

const versionSQL = `SELECT to_regclass($1) IS NOT NULL, coalesce(obj_description(to_regclass($1), 'pg_class'), '')`

const versionComment = "pgstore schema version "

// version returns the table's schema version, 0 if it does not exist; a
// table without one, or with a later one, is an error.
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

// requireCurrent returns an error until the table has this package's
// schema version; a yes is kept.
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
