package sqlitestore

import (
	"context"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Pinger = (*Store)(nil)

// pingSQL reads the table's schema and none of its rows, so that a file
// the store cannot use, or one not migrated, is not ready.
const pingSQL = `SELECT 1 FROM idempotency_keys LIMIT 0`

// Ping implements store.Pinger: the file opens and holds the table.
func (s *Store) Ping(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, pingSQL)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		return wrap("ping", err)
	}
	return nil
}
