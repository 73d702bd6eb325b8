// Package pgstore keeps idempotency records in a PostgreSQL table through a
// pgx v5 pool, one row per key, every expiry on the database's clock. A
// claim never waits for a transaction holding the key: it tries the key's
// advisory lock first. NewTx returns the transactional mode; both modes are
// store.Watchers. Call Migrate at start-up; docs/postgres.md is the manual.
package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/batch"
)

// DefaultTable is the table name unless WithTable sets another.
const DefaultTable = "idempotency_keys"

// Store is a store.Store backed by one PostgreSQL table.
type Store struct {
	pool       *pgxpool.Pool
	db         querier
	maxConns   int // bounds retries on dead connections
	schema     string
	table      string
	name       string // the table's quoted, possibly schema-qualified name
	logger     *slog.Logger
	abandoned  time.Duration
	tombstones time.Duration // 0: none kept
	sql        statements
	current    atomic.Bool // see requireCurrent
	listener   *listener
	newClaims  *batch.Sender[*newClaimCall]
	completes  *batch.Sender[*completeCall]
}

var _ store.Store = (*Store)(nil)

// querier is the pool, or one transaction of it.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Option configures a Store built by New.
type Option func(*Store)

// Table names are kept to 50 bytes, leaving room within PostgreSQL's 63 for
// names a later migration derives from the table's.
var (
	tableName  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)
	schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// WithTable sets the table that holds the records: 1 to 50 characters of
// a-z, 0-9 and _, not starting with a digit, or WithTable panics. Defaults
// to "idempotency_keys".
func WithTable(name string) Option {
	if !tableName.MatchString(name) {
		panic(fmt.Sprintf("pgstore: WithTable expects a name matching %s, got %q", tableName, name))
	}
	return func(s *Store) { s.table = name }
}

// WithSchema sets the schema, which must exist, that holds the table; the
// name follows WithTable's rules, up to 63 characters. Defaults to none:
// the table is found through each connection's search_path.
func WithSchema(name string) Option {
	if !schemaName.MatchString(name) {
		panic(fmt.Sprintf("pgstore: WithSchema expects a name matching %s, got %q", schemaName, name))
	}
	return func(s *Store) { s.schema = name }
}

// WithAbandonedRetention sets how long the sweeper keeps an in-flight row
// after its lease ended (its owner died, or released the key): until then
// the next claim gets a higher fencing number; after it the key starts
// again at 1. Defaults to 24 hours; d must be positive.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("pgstore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// WithLogger sets where the sweeper and the Watch listener report errors.
// Defaults to slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("pgstore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

func (s *Store) qualified(name string) string {
	if s.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{s.schema, name}.Sanitize()
}

// New returns a store over pool's table. It does not touch the database;
// the table must exist before first use (see Migrate). A nil pool panics.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	if pool == nil {
		panic("pgstore: New expects a non-nil pool")
	}
	s := &Store{pool: pool, db: pool, maxConns: int(pool.Config().MaxConns), table: DefaultTable, logger: slog.Default(),
		abandoned: 24 * time.Hour}
	for _, opt := range opts {
		opt(s)
	}
	s.name = s.qualified(s.table)
	s.sql = newStatements(s.name, s.tombstones)
	s.listener = newListener(s)
	s.newClaims = batch.New(batchLanes, s.claimNewAlone, s.sendNewClaims)
	s.completes = batch.New(batchLanes, s.completeAlone, s.sendCompletes)
	return s
}
