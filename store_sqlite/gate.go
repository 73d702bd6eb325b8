package sqlitestore

import (
	"context"
	"database/sql"
	"os"
	"sync"
)

// gate tells the processes sharing a database file whether an owner's
// write waits for the file's write lock, so that claims and sweeps of every
// process stand back until it has it: SQLite hands the freed lock to
// whichever connection asks first, in any process. While an owner of this
// process waits, the process holds a shared lock on the file path+"-owners"
// (a lock file of no content); a claim probes it for an exclusive lock.
// Where locking that file is not possible, owners go first within each
// process only.
type gate struct {
	mu      sync.Mutex
	opened  bool     // the lock files were looked for
	waiting int      // owner writes of this process waiting
	owners  *os.File // shared-locked while waiting > 0; nil: no gate
	probe   *os.File // another open file: its lock conflicts with owners'
}

// openGate opens the lock file beside db's file on the first call that can
// read the file's name on conn, and returns the gate; an owner may enter
// it before. A database without a file,
// or a lock file that cannot be opened (logged once), gives a gate of this
// process only.
func (s *Store) openGate(ctx context.Context, conn *sql.Conn) *gate {
	g := &s.gate
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	if opened {
		return g
	}
	var path string
	if err := conn.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		return g // tried again next time
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened {
		return g
	}
	g.opened = true
	if path == "" || !haveFlock {
		return g
	}
	owners, err := openLockFile(path + "-owners")
	if err == nil {
		if g.probe, err = openLockFile(path + "-owners"); err != nil {
			_ = owners.Close()
		}
	}
	if err != nil {
		s.logger.Warn("sqlitestore: owners go first only within each process", "err", err)
		return g
	}
	g.owners = owners
	if g.waiting > 0 {
		_ = lockShared(g.owners)
	}
	return g
}

// enter marks an owner's write of this process as waiting until leave.
func (g *gate) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	if g.waiting == 1 && g.owners != nil {
		_ = lockShared(g.owners) // failing, this process's owners go first only here
	}
}

// leave ends an enter.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
	if g.waiting == 0 && g.owners != nil {
		_ = unlock(g.owners)
	}
}

// ownerWaiting reports whether an owner's write of any process sharing
// the file waits for its write lock.
func (g *gate) ownerWaiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting > 0 {
		return true
	}
	if g.probe == nil {
		return false
	}
	if !tryLockExclusive(g.probe) {
		return true
	}
	_ = unlock(g.probe)
	return false
}
