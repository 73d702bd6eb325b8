package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/seed43327c4c/idempotency/store"
)

// Errors for a database file the store cannot use, wrapped with the
// operation and the driver's message (match them with errors.Is).
var (
	// ErrBusy means another connection held the file's lock past the busy
	// timeout.
	ErrBusy = errors.New("database file locked past the busy timeout")
	// ErrReadOnly means the file, its directory, or its -wal or -shm file
	// cannot be written or opened.
	ErrReadOnly = errors.New("database file is read-only")
	// ErrCorrupt means the file is not an SQLite database, or is damaged.
	ErrCorrupt = errors.New("database file is not a database or is corrupt")
	// ErrDiskFull means the disk has no room for a write. It also matches
	// store.ErrFull.
	ErrDiskFull = fmt.Errorf("database or disk is full (%w)", store.ErrFull)
)

// wrap returns err, met by op, naming op and matching the sentinel or
// context error it stands for; driver error values never leak.
func wrap(op string, err error) error {
	if sentinel := classify(err); sentinel != nil {
		return fmt.Errorf("sqlitestore: %s: %w (%v)", op, sentinel, err)
	}
	return fmt.Errorf("sqlitestore: %s: %v", op, err)
}

// wrapped is wrap's error for err, or nil.
func wrapped(op string, err error) error {
	if err == nil {
		return nil
	}
	return wrap(op, err)
}

// classify returns the sentinel or context error err stands for, or nil.
func classify(err error) error {
	for _, known := range []error{context.Canceled, context.DeadlineExceeded, ErrBusy} {
		if errors.Is(err, known) { // met already, or wrapped by wrap
			return known
		}
	}
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return nil
	}
	switch e.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return ErrBusy
	case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN: // CANTOPEN: a -wal or -shm it may not create
		return ErrReadOnly
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return ErrCorrupt
	case sqlite3.SQLITE_FULL:
		return ErrDiskFull
	}
	return nil
}
