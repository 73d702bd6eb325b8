// Package sqlitestore keeps idempotency records in a table of an SQLite
// database file through database/sql and the pure-Go driver
// modernc.org/sqlite, so that every process of one host that opens the
// file shares one record per key, with no server to run.
//
// Each record is one row whose key column holds store.HashKey of the
// record's key. A claim reads a live row without the write lock, and
// otherwise runs a single INSERT ... ON CONFLICT statement that creates
// the row, takes over an expired one, or else leaves the row as it is, and
// returns the row either way; complete, renew and release are
// single UPDATE statements conditioned on the owner's token and fencing
// number, and the affected row count decides. SQLite runs one writing
// statement at a time on a file, across all its processes, so each of
// them is atomic. Every expiry is computed and compared inside SQL on
// SQLite's clock (unixepoch('subsec'), in milliseconds): the host's clock,
// never a time passed in from Go.
//
// The file must be on a local disk of the one host whose processes share
// it: SQLite's locks do not work over a network file system, and a
// database there can be corrupted. Open opens a file with the settings
// several processes need; New takes any *sql.DB of this driver.
//
// The store never creates its table on its own: call Migrate once at
// start-up (every process may call it at once). Expired rows count as
// absent for Claim, which overwrites them, and stay in the table until
// DeleteExpired or the sweeper started by StartSweeper removes them.
package sqlitestore

import (
	"database/sql"
	"log/slog"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// Store is a store.Store backed by one table of an SQLite database. It is
// safe for concurrent use by many goroutines and by many processes of one
// host sharing the database file.
type Store struct {
	db        *sql.DB
	logger    *slog.Logger
	abandoned time.Duration // see WithAbandonedRetention
	turn      turn          // see write
	// watches are the keys watched right now, and pollEvery how often the
	// poller asks whether another connection committed (see Watch).
	watches   watches
	pollEvery time.Duration
}

var _ store.Store = (*Store)(nil)

// Option configures a Store built by New.
type Option func(*Store)

// WithAbandonedRetention sets how long the sweeper keeps an in-flight row
// after its lease ended when its owner never completed it: the process
// died, or the owner released the key for a retry. Until then, the request
// that takes the key over gets a fencing number higher than the last
// owner's; after it, the row is swept and the key starts again at fencing
// number 1. Defaults to 24 hours. It panics if d is not positive.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("sqlitestore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// WithLogger sets the logger the sweeper started by StartSweeper, and the
// poller of Watch, report their errors to. Defaults to slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("sqlitestore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

// New returns a store that keeps its records in the table idempotency_keys
// of db, which must be a database of the modernc.org/sqlite driver (see
// Open). It never opens a file and never touches the database: the table
// must exist before first use (see Migrate). A nil db or an invalid option
// panics.
func New(db *sql.DB, opts ...Option) *Store {
	if db == nil {
		panic("sqlitestore: New expects a non-nil db")
	}
	s := &Store{db: db, logger: slog.Default(), abandoned: 24 * time.Hour, pollEvery: pollInterval}
	for _, opt := range opts {
		opt(s)
	}
	return s
}
