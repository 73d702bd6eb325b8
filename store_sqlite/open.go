package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DefaultBusyTimeout is how long a statement of a database opened by Open
// waits for another connection's write lock before it fails with ErrBusy,
// when Open is given a busy timeout of 0.
const DefaultBusyTimeout = 5 * time.Second

// maxConns bounds the connections a database opened by Open keeps, open
// and idle: SQLite runs one writer at a time, so more would only wait for
// the lock, and fewer would close and reopen connections under load.
const maxConns = 4

// walPages is how many pages of 4 KiB the WAL of a database opened by Open
// holds before a commit copies them into the database, and the size the
// WAL file is cut back to after it: about 1 MiB, so that the WAL never
// takes a small volume whole and leaves the database no room to absorb it.
const walPages = 256

// Open opens the SQLite database file at path, creating it if it is
// missing (its directory must exist), with the settings that several
// processes sharing the file need, on every connection: the WAL journal
// (readers never wait for the writer), the busy timeout (0 means
// DefaultBusyTimeout), synchronous=FULL (a transaction the store committed
// survives a power loss, not only a crash), a WAL of about 1 MiB (see
// walPages), and BEGIN IMMEDIATE for the
// transactions of db.BeginTx. It checks that the file is a database that
// can be written and locked before it returns: otherwise the error matches
// ErrReadOnly, ErrCorrupt or ErrBusy, or names the missing directory.
// The caller closes db. The file must be on a local disk (see the package
// documentation).
func Open(ctx context.Context, path string, busyTimeout time.Duration) (*sql.DB, error) {
	if busyTimeout < 0 {
		return nil, fmt.Errorf("sqlitestore: open %s: negative busy timeout %v", path, busyTimeout)
	}
	if busyTimeout == 0 {
		busyTimeout = DefaultBusyTimeout
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if dir, err := os.Stat(filepath.Dir(abs)); err != nil || !dir.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %s: directory %s does not exist", path, filepath.Dir(abs))
	}
	db, err := sql.Open("sqlite", dsn(abs, busyTimeout))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := check(ctx, db, "open "+path); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// dsn is the driver's name for the file at the absolute path abs with the
// settings Open documents.
func dsn(abs string, busyTimeout time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(walPages)+")")
	q.Add("_pragma", "journal_size_limit("+strconv.Itoa(walPages*4096)+")")
	q.Set("_txlock", "immediate")
	return (&url.URL{Scheme: "file", OmitHost: true, Path: abs, RawQuery: q.Encode()}).String()
}

// check makes sure db's file is an SQLite database in WAL mode that this
// process can write, and whose write lock it can take within the busy
// timeout: it creates a table in a transaction that it rolls back. Errors
// are wrapped for op.
func check(ctx context.Context, db *sql.DB, op string) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return wrap(op, err)
	}
	if mode != "wal" {
		return fmt.Errorf("sqlitestore: %s: %w: the journal mode stayed %q instead of wal", op, ErrReadOnly, mode)
	}
	return onWriteLock(ctx, db, op, func(conn *sql.Conn) error {
		defer rollback(ctx, conn)
		_, err := conn.ExecContext(ctx, "CREATE TABLE sqlitestore_write_check (x)")
		return err
	})
}
