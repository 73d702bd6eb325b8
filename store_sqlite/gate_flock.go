//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package sqlitestore

import (
	"os"
	"syscall"
)

// haveFlock says that the gate can lock files.
const haveFlock = true

// openLockFile opens the lock file at path, creating it if missing, or
// read-only where this process may not write it.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if os.IsPermission(err) {
		return os.Open(path)
	}
	return f, err
}

// lockShared takes f's shared lock, waiting for an exclusive one to end.
func lockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if err != syscall.EINTR {
			return err
		}
	}
}

// tryLockExclusive takes f's exclusive lock if no other open file holds
// a lock on it.
func tryLockExclusive(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
