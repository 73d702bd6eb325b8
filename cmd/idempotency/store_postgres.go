package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed43327c4c/idempotency/store"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// openPostgres reaches the table cfg names in the database of cfg.url.
func openPostgres(ctx context.Context, cfg storeConfig) (store.Admin, func(), error) {
	pool, err := pgxpool.New(ctx, cfg.url)
	if err != nil {
		return nil, nil, err
	}
	opts := []pgstore.Option{pgstore.WithTable(cfg.table)}
	if cfg.schema != "" {
		opts = append(opts, pgstore.WithSchema(cfg.schema))
	}
	return pgstore.New(pool, opts...), pool.Close, nil
}
