package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Migrate creates the store's table and index (schema.sql) if the table
// does not exist yet, and otherwise changes nothing. It runs in one
// transaction holding a transaction-scoped advisory lock derived from the
// table name, so any number of workers may call it at start-up at once:
// one creates the table, the others wait for it and find it there.
//
// Creating the table needs the CREATE privilege on the schema; when the
// table already exists, Migrate needs no privilege beyond connecting, so
// workers running as a less privileged role may call it too. The schema
// itself must already exist.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
			"pgstore migrate "+s.name); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		_, err := tx.Exec(ctx, s.sql.schema)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.name, err)
	}
	return nil
}
