package pgstore

import (
	_ "embed"
	"strings"
)

// schemaSQL creates the table; see Migrate.
//
//go:embed schema.sql
var schemaSQL string

// upgradeSQL brings a table made by an earlier schema.sql to today's; see
// Migrate.
//
//go:embed upgrade.sql
var upgradeSQL string

// statements holds the store's SQL. Every statement is written against the
// default table name, as schema.sql is, and rewritten once by New for the
// configured (validated and quoted) names: the table's, and the one of the
// expiry index earlier schemas had, which upgradeSQL drops.
type statements struct {
	schema        string
	upgrade       string
	claim         string
	renew         string
	complete      string
	release       string
	deleteExpired string
	pages         string
	channel       string
	watchLock     string
	watchState    string
	unwatch       string
}

func newStatements(table, index string) statements {
	r := strings.NewReplacer(
		"idempotency_keys_expires_idx", index,
		DefaultTable, table,
	)
	return statements{
		schema:        r.Replace(schemaSQL),
		upgrade:       r.Replace(upgradeSQL),
		claim:         r.Replace(claimSQL),
		renew:         r.Replace(renewSQL),
		complete:      r.Replace(completeSQL),
		release:       r.Replace(releaseSQL),
		deleteExpired: r.Replace(deleteExpiredSQL),
		pages:         r.Replace(pagesSQL),
		channel:       r.Replace(`SELECT ` + channelSQL),
		watchLock:     r.Replace(watchLockSQL),
		watchState:    r.Replace(watchStateSQL),
		unwatch:       r.Replace(unwatchSQL),
	}
}
