// Package pgstore keeps idempotency records in a PostgreSQL table through a
// pgx v5 connection pool, so that every process sharing the database shares
// one record per key.
//
// Each record is one row whose key column holds the 32 bytes of
// store.HashKey of the record's key (its SHA-256: one short length for
// every key, and nothing of the client's key or scope in the table). A claim is a single
// INSERT ... ON CONFLICT DO NOTHING statement that also takes over an
// expired row and otherwise reads the existing one; complete, renew and
// release are single UPDATE statements conditioned on the owner's
// token and fencing number. Every expiry is computed and compared on the
// database's clock (statement_timestamp(), which is now() outside an
// explicit transaction), never the application's. A statement that meets
// a connection the server has terminated is run again on another one, and
// one that a serialization failure aborted is run again on a fresh
// snapshot, which is harmless for every statement here; any other error is
// returned, wrapped, and the middleware answers 503.
//
// NewTx returns the store in transactional mode (TxStore): the middleware
// then claims each key inside a transaction that the handler's own writes
// join through Tx, so they commit together with the stored response or not
// at all. In either mode a claim first tries the key's transaction-level
// advisory lock, without waiting, so that no claim ever waits for a
// transaction holding the key; every process using the table must run a
// version of this package that does. The dead-connection retry never runs
// a statement of a claim's transaction again (the sweeper's transaction,
// which holds its DELETE alone, is run again whole).
//
// The store never creates its table on its own: call Migrate once at
// start-up (every worker may call it at once), or apply schema.sql by hand.
// Expired rows count as absent for Claim, which overwrites them, and stay in
// the table until DeleteExpired or the sweeper started by StartSweeper
// removes them.
//
// Both modes implement store.Watcher: a request waiting for its duplicate
// in flight is woken by the completion's NOTIFY, sent only when someone
// watches the key, on a listening connection of the store's own (see
// Watch; Close ends it).
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
)

// DefaultTable is the table name used unless WithTable sets another.
const DefaultTable = "idempotency_keys"

// Store is a store.Store backed by one PostgreSQL table. It is safe for
// concurrent use by many goroutines and many processes.
type Store struct {
	pool      *pgxpool.Pool
	db        querier
	maxConns  int // the pool's size, bounding retries on dead connections
	schema    string
	table     string
	name      string // the table's quoted, possibly schema-qualified name
	logger    *slog.Logger
	abandoned time.Duration // see WithAbandonedRetention
	sql       statements
	current   atomic.Bool // the table has been seen at this package's schema version (requireCurrent)
	listener  *listener   // wakes Watch's callers
}

var _ store.Store = (*Store)(nil)

// querier is what the store's statements run on: the pool, or one
// transaction of it.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Option configures a Store built by New.
type Option func(*Store)

// identifier is what WithTable and WithSchema accept: a lower-case unquoted
// PostgreSQL name. Table names are kept to 50 bytes, leaving room within
// PostgreSQL's 63 for names a later migration derives from the table's.
var (
	tableName  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)
	schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// WithTable sets the table that holds the records. The name must be 1 to 50
// characters of lower-case ASCII letters, digits and underscores, not
// starting with a digit; anything else makes WithTable panic. It is always quoted
// as an identifier in SQL. Defaults to "idempotency_keys".
func WithTable(name string) Option {
	if !tableName.MatchString(name) {
		panic(fmt.Sprintf("pgstore: WithTable expects a name matching %s, got %q", tableName, name))
	}
	return func(s *Store) { s.table = name }
}

// WithSchema sets the schema that holds the table; the schema must already
// exist (Migrate does not create schemas). The name follows the rules of
// WithTable, up to 63 characters. Defaults to none: the table name is left
// unqualified and PostgreSQL resolves it through each connection's
// search_path, which is "public" unless the server or the role sets
// otherwise.
func WithSchema(name string) Option {
	if !schemaName.MatchString(name) {
		panic(fmt.Sprintf("pgstore: WithSchema expects a name matching %s, got %q", schemaName, name))
	}
	return func(s *Store) { s.schema = name }
}

// WithAbandonedRetention sets how long the sweeper keeps an in-flight row
// after its lease ended when its owner never completed it: the process
// died, or the owner released the key for a retry. Until then, the request
// that takes the key over gets a fencing number higher than the last
// owner's; after it, the row is swept and the key starts again at fencing
// number 1. Defaults to 24 hours. It panics if d is not positive.
func WithAbandonedRetention(d time.Duration) Option {
	if d <= 0 {
		panic("pgstore: WithAbandonedRetention expects d > 0")
	}
	return func(s *Store) { s.abandoned = d }
}

// WithLogger sets the logger the sweeper started by StartSweeper, and the
// listener started by Watch, report their errors to. Defaults to
// slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("pgstore: WithLogger expects a non-nil logger")
	}
	return func(s *Store) { s.logger = logger }
}

// qualified is the quoted name of the relation called name in the store's
// schema, or left to the search_path when WithSchema was not given.
func (s *Store) qualified(name string) string {
	if s.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{s.schema, name}.Sanitize()
}

// New returns a store that keeps its records in a table reached through
// pool. It never dials and never touches the database: connections are the
// pool's business, and the table must exist before first use (see Migrate).
// A nil pool or an invalid option panics.
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
	s.sql = newStatements(s.name)
	s.listener = newListener(s)
	return s
}
