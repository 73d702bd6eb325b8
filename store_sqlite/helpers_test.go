package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// testFile returns the path of a database file no other test uses, in the
// test's temporary directory.
func testFile(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "idempotency.db")
}

// openTestDB opens path with Open and the default busy timeout, closed when
// the test ends.
func openTestDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := Open(context.Background(), path, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// newTestStoreOn returns a store on path, through a *sql.DB of its own,
// with the table migrated.
func newTestStoreOn(t testing.TB, path string, opts ...Option) *Store {
	t.Helper()
	s := New(openTestDB(t, path), opts...)
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// newTestStore returns a store on a fresh file of its own.
func newTestStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	return newTestStoreOn(t, testFile(t), opts...)
}

// handlesOn returns n stores on path, each through a *sql.DB of its own,
// as n processes would hold the file.
func handlesOn(t testing.TB, path string, n int) []store.Store {
	t.Helper()
	stores := make([]store.Store, n)
	for i := range stores {
		stores[i] = newTestStoreOn(t, path)
	}
	return stores
}

// spread is a store.Store that sends each call to the next of its stores
// in turn: stores on one file through handles or processes of their own,
// as the workers of one host share it.
type spread struct {
	stores []store.Store
	next   atomic.Uint64
}

func (s *spread) pick() store.Store {
	return s.stores[(s.next.Add(1)-1)%uint64(len(s.stores))]
}

func (s *spread) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	return s.pick().Claim(ctx, key, fingerprint, token, lease)
}

func (s *spread) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	return s.pick().Renew(ctx, key, owner, lease)
}

func (s *spread) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	return s.pick().Complete(ctx, key, owner, resp, retention)
}

func (s *spread) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.pick().Release(ctx, key, owner)
}

// mustClaim claims key, which must be free or expired, and returns the
// claimed record.
func mustClaim(t *testing.T, s store.Store, key, token string, lease time.Duration) store.Record {
	t.Helper()
	rec, claimed, err := s.Claim(context.Background(), key, "fp", token, lease)
	require.NoError(t, err)
	require.True(t, claimed, "%q is claimed", key)
	return rec
}
