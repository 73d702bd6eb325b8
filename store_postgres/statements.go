package pgstore

import (
	_ "embed"
	"strings"
)

// schemaSQL creates the table and its index; see Migrate.
//
//go:embed schema.sql
var schemaSQL string

// statements holds the store's SQL. Every statement is written against the
// default table name, as schema.sql is, and rewritten once by New for the
// configured (validated and quoted) names.
type statements struct {
	schema        string
	claim         string
	renew         string
	complete      string
	release       string
	deleteExpired string
}

func newStatements(table, index string) statements {
	r := strings.NewReplacer(
		"idempotency_keys_expires_idx", index,
		DefaultTable, table,
	)
	return statements{
		schema:        r.Replace(schemaSQL),
		claim:         r.Replace(claimSQL),
		renew:         r.Replace(renewSQL),
		complete:      r.Replace(completeSQL),
		release:       r.Replace(releaseSQL),
		deleteExpired: r.Replace(deleteExpiredSQL),
	}
}
