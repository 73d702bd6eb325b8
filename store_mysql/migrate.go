package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// schemaVersion is this package's schema version, recorded in the table's
// comment as versionComment followed by the number.
const (
	schemaVersion  = 2
	versionComment = "mysqlstore schema version "
)

// Version 2 added the steps columns and completed_at, which a table made
// before gets from addStepsSQL (schema.sql has them for a new one).
const (
	hasStepsSQL = "SELECT COUNT(*) FROM information_schema.COLUMNS" +
		" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'steps'"
	addStepsSQL = "ALTER TABLE `idempotency_keys` ADD COLUMN steps LONGBLOB, ADD COLUMN step_names BLOB," +
		" ADD COLUMN step_count SMALLINT NOT NULL DEFAULT 0, ADD COLUMN completed_at DATETIME(6)"
)

// migrateLock is one named lock for the server: Migrate holds it while it
// reads and changes a table, waiting up to migrateWait for it.
const (
	migrateLock = "mysqlstore migrate"
	migrateWait = 30 * time.Second
)

// Migrate creates the table (schema.sql) and its claim procedure
// (claim.sql) unless the table's comment records this schema version, and
// then records it. It holds a named lock meanwhile, so any number of
// workers may call it at once. A current table needs no privilege beyond
// reading its comment. Until the table is current, Claim and BeginClaim
// refuse to claim on it.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("mysqlstore: migrate %s: %w", s.table, explain(err))
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var locked sql.NullBool
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", migrateLock, migrateWait.Seconds()).Scan(&locked); err != nil {
		return err
	}
	if !locked.Bool {
		return fmt.Errorf("another Migrate held the lock %q for %v", migrateLock, migrateWait)
	}
	defer releaseLock(conn, migrateLock)
	version, err := s.version(ctx, conn)
	if err != nil || version == schemaVersion {
		return err
	}
	if _, err := conn.ExecContext(ctx, s.sql.schema); err != nil {
		return err
	}
	var hasSteps int
	if err := conn.QueryRowContext(ctx, hasStepsSQL, s.table).Scan(&hasSteps); err != nil {
		return err
	}
	if hasSteps == 0 {
		if _, err := conn.ExecContext(ctx, s.sql.rewrite.Replace(addStepsSQL)); err != nil {
			return err
		}
	}
	for _, stmt := range []string{
		s.sql.rewrite.Replace("DROP PROCEDURE IF EXISTS `idempotency_keys_claim`"),
		s.sql.claimProcedure,
		s.sql.rewrite.Replace("ALTER TABLE `idempotency_keys` COMMENT = '" + versionComment + strconv.Itoa(schemaVersion) + "'"),
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// releaseLock releases the named lock name that conn holds; if it cannot,
// it closes conn, which releases it, instead of returning it to the pool.
func releaseLock(conn *sql.Conn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// name is written in, a literal of this package's own: one round trip.
	if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK('"+name+"')"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// releaseTimeout bounds a named lock's release, which may come after its
// caller's context ended.
const releaseTimeout = 5 * time.Second

const versionSQL = "SELECT DATABASE(), (SELECT TABLE_COMMENT FROM information_schema.TABLES" +
	" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?)"

// errNoDatabase means the DSN names no database for the table.
var errNoDatabase = errors.New("the connection has no database selected: name one in the DSN (user@tcp(host)/database)")

// queryRower is the pool, or one connection or transaction of it.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// version returns the table's schema version, 0 if it does not exist or
// is not visible to the user; a comment of another kind, or a later
// version, is an error.
func (s *Store) version(ctx context.Context, db queryRower) (int, error) {
	var database, comment sql.NullString
	if err := db.QueryRowContext(ctx, versionSQL, s.table).Scan(&database, &comment); err != nil {
		return 0, err
	}
	if !database.Valid {
		return 0, errNoDatabase
	}
	if !comment.Valid {
		return 0, nil
	}
	digits, ok := strings.CutPrefix(comment.String, versionComment)
	version, err := strconv.Atoi(digits)
	if !ok || err != nil || version < 0 {
		return 0, fmt.Errorf("the table's comment %q records no schema version", comment.String)
	}
	if version > schemaVersion {
		return 0, fmt.Errorf("schema version %d is later than this package's %d", version, schemaVersion)
	}
	return version, nil
}

// requireCurrent returns an error until the table has this package's
// schema version; a yes is kept.
func (s *Store) requireCurrent(ctx context.Context) error {
	if s.current.Load() {
		return nil
	}
	version, err := s.version(ctx, s.db)
	if err != nil {
		return err
	}
	if version != schemaVersion {
		return fmt.Errorf("table %s is not at schema version %d, or the user cannot see it: run Migrate, and grant the user SELECT, INSERT, UPDATE, DELETE on it and EXECUTE on its procedure (docs/mysql.md)",
			s.table, schemaVersion)
	}
	s.current.Store(true)
	return nil
}
