package sqlitestore

import (
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConformance runs the shared store suite, each subtest on a file of
// its own: through one *sql.DB; spread over four *sql.DB handles on the
// file, as four processes would hold them; and spread over this process
// and a helper process of its own (see helperStore), two real processes
// racing on one file.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name     string
		newStore func(t *testing.T) store.Store
	}{
		{"one handle", func(t *testing.T) store.Store { return newTestStore(t) }},
		{"four handles", func(t *testing.T) store.Store { return &spread{stores: handlesOn(t, testFile(t), 4)} }},
		{"two processes", func(t *testing.T) store.Store {
			path := testFile(t)
			return &spread{stores: []store.Store{newTestStoreOn(t, path), startHelper(t, path)}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, c.newStore)
		})
	}
}

func TestOptionsAreChecked(t *testing.T) {
	assert.PanicsWithValue(t, "sqlitestore: New expects a non-nil db", func() { New(nil) })
	assert.PanicsWithValue(t, "sqlitestore: WithAbandonedRetention expects d > 0", func() { WithAbandonedRetention(0) })
	assert.PanicsWithValue(t, "sqlitestore: WithLogger expects a non-nil logger", func() { WithLogger(nil) })
}

// TestStatementsPerRequest: a first request costs the store three
// statements on the records (a read, the claim, complete) and a replay one
// (the read), counted at the driver, beside the pragmas that set each
// connection's waits (see Store.write).
func TestStatementsPerRequest(t *testing.T) {
	registerCounted.Do(func() {
		sql.Register("sqlite-counted", countingDriver{Driver: &sqlite.Driver{}, statements: &countedStatements})
	})
	statements := &countedStatements
	path := filepath.Join(t.TempDir(), "counted.db")
	db, err := sql.Open("sqlite-counted", dsn(path, time.Second))
	require.NoError(t, err)
	defer db.Close()
	s := New(db)
	require.NoError(t, s.Migrate(t.Context()))

	count := func(do func()) int64 {
		before := statements.Load()
		do()
		return statements.Load() - before
	}
	var rec store.Record
	assert.EqualValues(t, 2, count(func() {
		var claimed bool
		rec, claimed, err = s.Claim(t.Context(), "k", "fp", "token", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
	}), "claim")
	assert.EqualValues(t, 1, count(func() {
		require.NoError(t, s.Complete(t.Context(), "k", rec.Owner, &store.Response{Status: 201, Body: []byte("x")}, time.Hour))
	}), "complete")
	assert.EqualValues(t, 1, count(func() {
		replay, claimed, err := s.Claim(t.Context(), "k", "fp", "token-2", time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, store.StateCompleted, replay.State)
	}), "replay")
}

// countedStatements counts the statements of the "sqlite-counted" driver,
// registered once however often the test runs.
var (
	countedStatements atomic.Int64
	registerCounted   sync.Once
)

// countingDriver counts the statements its connections prepare, but for
// those on pragmas. Its
// connections offer no ExecerContext or QueryerContext, so database/sql
// prepares every statement it runs.
type countingDriver struct {
	driver.Driver
	statements *atomic.Int64
}

func (d countingDriver) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, statements: d.statements}, nil
}

type countingConn struct {
	driver.Conn
	statements *atomic.Int64
}

func (c countingConn) Prepare(query string) (driver.Stmt, error) {
	if !strings.Contains(strings.ToLower(query), "pragma") {
		c.statements.Add(1)
	}
	return c.Conn.Prepare(query)
}

// TestTombstones runs the tombstones suite against a store that keeps
// them for storetest.TombstoneTime.
func TestTombstones(t *testing.T) {
	storetest.RunTombstones(t, func(t *testing.T) store.Store {
		return newTestStore(t, WithTombstones(storetest.TombstoneTime))
	})
}
