package main

import (
	"context"
	"fmt"
	"os"

	"github.com/seed43327c4c/idempotency/store"
	sqlitestore "github.com/seed43327c4c/idempotency/store_sqlite"
)

// openSQLite opens the SQLite file cfg.url, which must exist.
func openSQLite(ctx context.Context, cfg storeConfig) (store.Admin, func(), error) {
	if _, err := os.Stat(cfg.url); err != nil {
		return nil, nil, fmt.Errorf("-url: %w", err)
	}
	db, err := sqlitestore.Open(ctx, cfg.url, 0)
	if err != nil {
		return nil, nil, err
	}
	return sqlitestore.New(db), func() { _ = db.Close() }, nil
}
