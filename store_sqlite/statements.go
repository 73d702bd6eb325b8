package sqlitestore

import (
	_ "embed"
	"strings"
)

//go:embed schema.sql
var schemaSQL string

//go:embed migration2.sql
var migration2SQL string

// nowMS is SQLite's clock in milliseconds since the Unix epoch. Every use
// within one statement sees the same instant.
const nowMS = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`

// onSQLiteClock replaces NOW in sql with nowMS.
func onSQLiteClock(sql string) string { return strings.ReplaceAll(sql, "NOW", nowMS) }
