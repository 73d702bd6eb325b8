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
// The lock file is open only while the process waits or probes, so that
// nothing holds it otherwise. Where locking it is not possible, owners go
// first within each process only.
type gate struct {
	mu      sync.Mutex
	opened  bool     // the database's file name was looked up
	path    string   // the lock file; "" for none
	waiting int      // owner writes of this process waiting
	owners  *os.File // open and shared-locked while waiting > 0
}

// openGate looks up the lock file beside db's file on the first call that
// can read the file's name on conn, and returns the gate; an owner may
// enter it before. A database without a file gives a gate of this process
// only.
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
	if path != "" && haveFlock {
		g.path = path + "-owners"
		if g.waiting > 0 {
			g.lockOwners()
		}
	}
	return g
}

// enter marks an owner's write of this process as waiting until leave.
func (g *gate) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	if g.waiting == 1 && g.path != "" {
		g.lockOwners()
	}
}

// leave ends an enter.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
	if g.waiting == 0 && g.owners != nil {
		_ = g.owners.Close() // which ends its lock
		g.owners = nil
	}
}

// lockOwners opens the lock file and takes its shared lock; failing, this
// process's owners go first only here. g.mu is held.
func (g *gate) lockOwners() {
	f, err := openLockFile(g.path)
	if err != nil {
		return
	}
	if lockShared(f) != nil {
		_ = f.Close()
		return
	}
	g.owners = f
}

// ownerWaiting reports whether an owner's write of any process sharing
// the file waits for its write lock.
func (g *gate) ownerWaiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting > 0 {
		return true
	}
	if g.path == "" {
		return false
	}
	probe, err := openLockFile(g.path)
	if err != nil {
		return false
	}
	defer probe.Close() // which ends its lock
	return !tryLockExclusive(probe)
}
