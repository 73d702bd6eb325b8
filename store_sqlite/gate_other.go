//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package sqlitestore

import (
	"errors"
	"os"
)

// haveFlock is false: owners go first within each process only.
const haveFlock = false

func openLockFile(string) (*os.File, error) {
	return nil, errors.New("no flock on this system")
}

func lockShared(*os.File) error      { return nil }
func tryLockExclusive(*os.File) bool { return true }
