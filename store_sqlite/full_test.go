package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// smallVolume mounts a tmpfs of size bytes on a fresh directory, unmounted
// when the test ends, and returns the directory; the test is skipped where
// it cannot mount one.
func smallVolume(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs (needs root): %v %s", size, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestFullDiskRecovers: on a 2 MB volume, a store that fills the volume,
// its own records or a filler file, fails with ErrDiskFull; once the filler
// is removed, new keys are claimed and completed again within 5 s, by the
// same store or by one opened after a restart.
func TestFullDiskRecovers(t *testing.T) {
	for _, c := range []struct {
		name    string
		records bool // whether the records fill the volume, after the filler
		restart bool // whether the store is closed and opened again once full
	}{
		{"records fill the volume", true, false},
		{"records fill the volume, then a restart", true, true},
		{"a filler fills the volume", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := smallVolume(t, "2m")
			path := filepath.Join(dir, "idempotency.db")
			s := openOn(t, path)
			filler := filepath.Join(dir, "filler")
			body := bytes.Repeat([]byte("x"), 16<<10)
			for i := range 10 {
				require.NoError(t, pair(s, fmt.Sprintf("before-%d", i), body))
			}
			if c.records {
				require.NoError(t, os.WriteFile(filler, make([]byte, 256<<10), 0o600))
			} else {
				fillVolume(t, filler)
			}
			var full error
			for i := 0; full == nil; i++ {
				require.Less(t, i, 10000, "the volume never filled")
				full = pair(s, fmt.Sprintf("fill-%d", i), body)
			}
			assert.ErrorIs(t, full, ErrDiskFull)
			assert.ErrorIs(t, full, store.ErrFull)
			assert.Contains(t, full.Error(), "disk is full")
			if c.restart {
				require.NoError(t, s.db.Close())
				s = openOn(t, path)
			}
			require.NoError(t, os.Remove(filler))
			// More keys than the freed room holds unless the WAL is
			// checkpointed and cut short again.
			deadline := time.Now().Add(5 * time.Second)
			for answered, i := 0, 0; answered < afterFull; i++ {
				err := pair(s, fmt.Sprintf("after-%d", i), []byte("ok"))
				if err == nil {
					answered++
					continue
				}
				require.True(t, time.Now().Before(deadline), "%d of %d new keys answered within 5 s of space being freed: %v", answered, afterFull, err)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// afterFull is how many new keys TestFullDiskRecovers wants answered once
// room is freed: few bytes of records, but pages of WAL for each commit,
// more than the volume holds.
const afterFull = 150

// openOn opens a store on path, with the short busy timeout, closed when
// the test ends.
func openOn(t *testing.T, path string) *Store {
	t.Helper()
	s := New(openBusy(t, path))
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// fillVolume writes the file at path until its volume has no room left.
func fillVolume(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
}

// pair claims key and completes it with body, as a first request does.
func pair(s *Store, key string, body []byte) error {
	rec, claimed, err := s.Claim(context.Background(), key, "fp", "token", time.Minute)
	if err != nil {
		return err
	}
	if !claimed {
		return errors.New(key + " not claimed")
	}
	return s.Complete(context.Background(), key, rec.Owner, &store.Response{Status: 201, Body: body}, time.Hour)
}
