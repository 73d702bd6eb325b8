// Package mysqlstore keeps idempotency records in a MySQL (8.0 and later)
// or MariaDB (10.6 and later) table through database/sql and
// github.com/go-sql-driver/mysql, one row per key, every expiry on the
// server's clock. A claim is one CALL of a stored procedure that Migrate
// creates beside the table. NewTx returns the transactional mode. Call
// Migrate at start-up; docs/mysql.md is the manual.
package mysqlstore

import (
	"database/sql"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// DefaultTable is the table name unless WithTable sets another.
const DefaultTable = "idempotency_keys"

// Store is a store.Store backed by one MySQL table.
type Store struct {
	db         *sql.DB
	table      string
	logger     *slog.Logger
	abandoned  time.Duration
	tombstones time.Duration // 0: none
	sql        statements
	claims     slots
	current    atomic.Bool // see requireCurrent
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Admin  = (*Store)(nil)
	_ store.Pinger = (*Store)(nil)
)

// Option configures a Store built by New.
type Option func(*Store)

// Table names are kept to 50 bytes, leaving room within MySQL's 64 for
// the names derived from the table's (its procedure, its index).
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// WithTable sets the table that holds the records, in the connection's
// database: 1 to 50 characters of a-z, 0-9 and _, not starting with a
// digit, or WithTable panics. Defaults to "idempotency_keys".
func WithTable(name string) Option {
	if !tableName.MatchString(name) {
		panic(fmt.Sprintf("mysqlstore: WithTable expects a name matching %s, got %q", tableName, name))
	}
	return func(s *Store) { s.table = name }
}

// WithTombstones makes the store keep, for d after a done row's retention
// ends, its tombstone: the row, whose response the sweeper drops, which
// Claim returns as a store.StateExpired record naming when it completed,
// so that a retry later than the retention is refused instead of run
// again. Every process sharing the table must use the same d. Off by
// default; d must be positive, in whole microseconds.
func WithTombstones(d time.Duration) Option {
	if d <= 0 {
		panic("mysqlstore: WithTombstones expects d > 0")
	}
	return func(s *Store) { s.tombstones = d }
}

// WithAbandonedRetention sets how long the sweeper keeps an in-flight row
// after its lease ended (its owner died, or released the key): until then
// the next claim gets a higher fencing number; after it the key starts
// again at 1. Defaults to 24 hours; d must be positive.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("mysqlstore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// WithLogger sets where the sweeper reports errors. Defaults to
// slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("mysqlstore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

// New returns a store over db's table. It does not touch the database; the
// table must exist before first use (see Migrate). Set db's pool size
// (SetMaxOpenConns) before New: claims leave a quarter of it, at least one
// connection, to the owners' calls. A nil db panics.
func New(db *sql.DB, opts ...Option) *Store {
	if db == nil {
		panic("mysqlstore: New expects a non-nil db")
	}
	s := &Store{db: db, table: DefaultTable, logger: slog.Default(), abandoned: 24 * time.Hour}
	for _, opt := range opts {
		opt(s)
	}
	s.sql = newStatements(db, s.table)
	s.claims = newSlots(db.Stats().MaxOpenConnections)
	return s
}
