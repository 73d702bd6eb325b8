package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// shortBusy is the busy timeout of the tests that hold a file locked.
const shortBusy = 200 * time.Millisecond

// migratedFile returns a database file with the store's table and n
// completed records in it, and no connection open on it.
func migratedFile(t *testing.T, n int) string {
	t.Helper()
	path := testFile(t)
	db, err := Open(context.Background(), path, 0)
	require.NoError(t, err)
	s := New(db)
	require.NoError(t, s.Migrate(context.Background()))
	for i := range n {
		rec := mustClaim(t, s, "k"+strings.Repeat("x", i), "t", time.Minute)
		require.NoError(t, s.Complete(context.Background(), "k"+strings.Repeat("x", i), rec.Owner,
			&store.Response{Status: http.StatusCreated, Body: []byte("ok")}, time.Hour))
	}
	require.NoError(t, db.Close())
	return path
}

// lockFile opens path and holds its write lock until the test ends.
func lockFile(t *testing.T, path string) {
	t.Helper()
	conn, err := openTestDB(t, path).Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := conn.ExecContext(context.Background(), "ROLLBACK")
		assert.NoError(t, err)
		assert.NoError(t, conn.Close())
	})
}

// makeReadOnly makes path, a file or a directory, read-only, even for
// root (by the immutable attribute, which chattr sets), until the test
// ends.
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	mode := os.FileMode(0o444)
	if info.IsDir() {
		mode = 0o555
	}
	require.NoError(t, os.Chmod(path, mode))
	t.Cleanup(func() { _ = os.Chmod(path, info.Mode().Perm()) }) // after chattr -i, so that the test's directory can go
	if os.Geteuid() != 0 {
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("running as root, and chattr +i (to make a file read-only for root) failed: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

// inReadOnlyDir returns file's path, with its directory made read-only.
func inReadOnlyDir(file func(t *testing.T) string) func(t *testing.T) string {
	return func(t *testing.T) string {
		path := file(t)
		makeReadOnly(t, filepath.Dir(path))
		return path
	}
}

// TestOpenRefusesBadFiles: a file that cannot serve fails at start-up with
// a clear error, before any request.
func TestOpenRefusesBadFiles(t *testing.T) {
	for _, c := range []struct {
		name    string
		path    func(t *testing.T) string
		want    error
		message string
	}{
		{"missing directory", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "missing", "idempotency.db")
		}, nil, "does not exist"},
		{"not a database", func(t *testing.T) string {
			path := testFile(t)
			require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("not a database "), 500), 0o600))
			return path
		}, ErrCorrupt, "not a database"},
		{"read-only", func(t *testing.T) string {
			path := migratedFile(t, 0)
			makeReadOnly(t, path)
			return path
		}, ErrReadOnly, "read-only"},
		// No -wal or -shm can be made beside the file.
		{"read-only directory", inReadOnlyDir(func(t *testing.T) string { return migratedFile(t, 0) }), ErrReadOnly, "read-only"},
		{"new file in a read-only directory", inReadOnlyDir(func(t *testing.T) string { return testFile(t) }), ErrReadOnly, "read-only"},
		{"locked past the busy timeout", func(t *testing.T) string {
			path := migratedFile(t, 0)
			lockFile(t, path)
			return path
		}, ErrBusy, "locked past the busy timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := c.path(t)
			db, err := Open(context.Background(), path, shortBusy)
			require.Error(t, err)
			assert.Nil(t, db)
			assert.Contains(t, err.Error(), "sqlitestore: open "+path)
			assert.Contains(t, err.Error(), c.message)
			if c.want != nil {
				assert.ErrorIs(t, err, c.want)
			}
		})
	}
}

// TestBadFileAtRequestTime: once the store is open, a file locked past
// the busy timeout gets every request 409 key-in-flight (the key may be in
// flight: the client retries), and one damaged past its header 503
// store-unavailable; the handler never runs.
func TestBadFileAtRequestTime(t *testing.T) {
	for _, c := range []struct {
		name    string
		spoil   func(t *testing.T, path string)
		open    bool // whether the store is open when the file is spoiled
		status  int
		problem string
	}{
		{"locked past the busy timeout", lockFile, true, http.StatusConflict, idempotency.ProblemKeyInFlight},
		{"corrupt pages", func(t *testing.T, path string) {
			// Every page but the first, which holds the header and the
			// schema, overwritten.
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Greater(t, len(b), 4096)
			copy(b[4096:], bytes.Repeat([]byte{0xa5}, len(b)))
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}, false, http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := migratedFile(t, 50)
			var db *sql.DB
			if c.open {
				db = openBusy(t, path)
			}
			c.spoil(t, path)
			if !c.open {
				db = openBusy(t, path)
			}
			s := New(db)
			var ran atomic.Int32
			h := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			for _, key := range []string{"k", "kx", "new"} {
				r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				assert.Equal(t, c.status, w.Code, "key %s: %s", key, w.Body)
				assert.Equal(t, c.problem, problemType(t, w))
			}
			assert.Zero(t, ran.Load(), "no handler runs without its claim")
		})
	}
}

// problemType is the type of the problem w holds.
func problemType(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var p struct{ Type string }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), "%s", w.Body)
	return p.Type
}

// openBusy opens path with the short busy timeout, closed when the test
// ends.
func openBusy(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := Open(context.Background(), path, shortBusy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
