package pgstore

import (
	_ "embed"
	"strings"
	"time"
)

// schemaSQL creates the table at schema version 1; see Migrate.
//
//go:embed schema.sql
var schemaSQL string

//go:embed migration2.sql
var migration2SQL string

//go:embed migration3.sql
var migration3SQL string

//go:embed migration4.sql
var migration4SQL string

// migrationsSQL holds the migrations in order: the nth brings a table to
// schema version n, and records it in the table's comment.
var migrationsSQL = []string{schemaSQL, migration2SQL, migration3SQL, migration4SQL}

// statements holds the store's SQL. Every statement is written against the
// default table name, as schema.sql is, and rewritten once by New for the
// configured (validated and quoted) table name and tombstone time.
type statements struct {
	migrations     []string
	claimNew       string
	claimLive      string
	claim          string
	renew          string
	complete       string
	completed      string
	release        string
	saveStep       string
	deleteExpired  string
	pages          string
	channel        string
	watchLock      string
	watchState     string
	unwatch        string
	inspect        string
	deleteLock     string
	deleteDone     string
	deleteInFlight string
	find           string
}

func newStatements(table string, tombstones time.Duration) statements {
	r := strings.NewReplacer(DefaultTable, table)
	t := tombstoneReplacer(tombstones)
	migrations := make([]string, len(migrationsSQL))
	for i, sql := range migrationsSQL {
		migrations[i] = r.Replace(sql)
	}
	return statements{
		migrations:     migrations,
		claimNew:       r.Replace(claimNewSQL),
		claimLive:      t.Replace(r.Replace(claimLiveSQL)),
		claim:          t.Replace(r.Replace(claimSQL)),
		renew:          r.Replace(renewSQL),
		complete:       r.Replace(completeSQL),
		completed:      r.Replace(completedSQL),
		release:        r.Replace(releaseSQL),
		saveStep:       r.Replace(saveStepSQL),
		deleteExpired:  t.Replace(r.Replace(deleteExpiredSQL)),
		pages:          r.Replace(pagesSQL),
		channel:        r.Replace(`SELECT ` + channelSQL),
		watchLock:      r.Replace(watchLockSQL),
		watchState:     r.Replace(watchStateSQL),
		unwatch:        r.Replace(unwatchSQL),
		inspect:        t.Replace(r.Replace(inspectSQL)),
		deleteLock:     t.Replace(r.Replace(deleteLockSQL)),
		deleteDone:     r.Replace(deleteDoneSQL),
		deleteInFlight: r.Replace(deleteInFlightSQL),
		find:           t.Replace(r.Replace(findSQL)),
	}
}
