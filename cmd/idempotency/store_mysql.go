package main

import (
	"context"
	"database/sql"

	"github.com/go-sql-driver/mysql"

	"github.com/seed43327c4c/idempotency/store"
	mysqlstore "github.com/seed43327c4c/idempotency/store_mysql"
)

// openMySQL reaches the table cfg names in the database of the DSN cfg.url.
func openMySQL(_ context.Context, cfg storeConfig) (store.Admin, func(), error) {
	dsn, err := mysql.ParseDSN(cfg.url)
	if err != nil {
		return nil, nil, err
	}
	connector, err := mysql.NewConnector(dsn)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(connector)
	return mysqlstore.New(db, mysqlstore.WithTable(cfg.table)), func() { _ = db.Close() }, nil
}
