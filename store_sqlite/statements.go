package sqlitestore

import (
	_ "embed"
	"strings"
)

// schemaSQL creates the table and its index; see Migrate.
//
//go:embed schema.sql
var schemaSQL string

// nowMS is SQLite's clock in whole milliseconds since the Unix epoch.
// SQLite gives every use of 'now' within one statement the same time, so
// one statement compares and computes all its times at one instant.
const nowMS = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`

// onSQLiteClock writes the store's SQL with NOW standing for nowMS.
func onSQLiteClock(sql string) string { return strings.ReplaceAll(sql, "NOW", nowMS) }
