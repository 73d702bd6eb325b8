// Package sqlitestore keeps idempotency records in an SQLite database
// file, through the pure-Go driver modernc.org/sqlite, shared by the
// processes of one host. The file must be on a local disk: SQLite's locks
// do not work over a network file system. See docs/sqlite.md.
package sqlitestore

import (
	"database/sql"
	"log/slog"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// Store is a store.Store on an SQLite table, safe for use by goroutines
// and by the processes of one host.
type Store struct {
	db        *sql.DB
	logger    *slog.Logger
	abandoned time.Duration
	turn      turn
	gate      gate
	watches   watches
	pollEvery time.Duration
	txLease   time.Duration
	tombs     time.Duration // 0: no tombstones
}

var _ store.Store = (*Store)(nil)

// Option configures a Store built by New.
type Option func(*Store)

// WithAbandonedRetention sets how long the sweeper keeps an in-flight row
// whose lease ended, so that a takeover's fencing number stays above the
// last owner's; after it the key starts again at 1. Defaults to 24 hours.
// It panics if d is not positive.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("sqlitestore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// WithTxLease sets the lease of the claims of NewTx's store: renewed until
// the request's transaction holds the write lock, it frees the key of a request whose
// process died. Defaults to 30 seconds. It panics if d is under a
// millisecond.
func WithTxLease(d time.Duration) Option {
	if d < time.Millisecond {
		panic("sqlitestore: WithTxLease expects d >= 1ms")
	}
	return func(s *Store) { s.txLease = d }
}

// WithTombstones makes the store keep, for d after a done row's retention
// ends, its tombstone: the row without its response (the sweeper drops
// header and body), which Claim returns as a StateExpired record naming
// when it completed, so that a retry later than the retention is refused
// instead of run again. Every process sharing the file must use the same
// d. Off by default. It panics if d is under a millisecond.
func WithTombstones(d time.Duration) Option {
	if d < time.Millisecond {
		panic("sqlitestore: WithTombstones expects d >= 1ms")
	}
	return func(s *Store) { s.tombs = d }
}

// WithLogger sets the logger for the errors of the sweeper and of Watch's
// poller. Defaults to slog.Default(). It panics if logger is nil.
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("sqlitestore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

// New returns a store on the table idempotency_keys of db, a
// modernc.org/sqlite database (see Open). It does not touch db: run
// Migrate before first use. A nil db or an invalid option panics.
func New(db *sql.DB, opts ...Option) *Store {
	if db == nil {
		panic("sqlitestore: New expects a non-nil db")
	}
	s := &Store{db: db, logger: slog.Default(), abandoned: 24 * time.Hour, pollEvery: pollInterval,
		txLease: 30 * time.Second}
	for _, opt := range opts {
		opt(s)
	}
	return s
}
