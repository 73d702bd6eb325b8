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

// DefaultBusyTimeout is the busy timeout Open sets when given 0.
const DefaultBusyTimeout = 5 * time.Second

// maxConns bounds the open and idle connections of a database from Open:
// SQLite has one writer at a time, so more would only wait.
const maxConns = 4

// walPages (of 4 KiB) is the WAL size at which a commit checkpoints it and
// to which the file is cut back, so that the WAL never fills a small volume.
const walPages = 256

// Open opens or creates the SQLite database file at path (its directory
// must exist) with the settings processes sharing it need: WAL, busyTimeout
// (0 means DefaultBusyTimeout), synchronous=FULL, a bounded WAL, and BEGIN
// IMMEDIATE for db.BeginTx. If it cannot write and lock the file, the
// error matches ErrReadOnly, ErrCorrupt or ErrBusy, or names a missing
// directory.
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

// dsn is the driver's name for the file at abs with Open's settings.
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

// check makes sure db's file is in WAL mode and that this process can
// write it and take its write lock.
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
