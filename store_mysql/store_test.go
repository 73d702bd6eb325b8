package mysqlstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConformance runs the shared store suites: Run against the plain
// store, with and without the DSN's clientFoundRows and interpolateParams,
// and the transactional one, RunTx against the transactional store's
// transactions, and RunAdmin and RunSteps against the plain store.
func TestConformance(t *testing.T) {
	t.Run("Store", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t) })
	})
	t.Run("Store clientFoundRows interpolateParams", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newFoundRowsStore(t) })
	})
	t.Run("TxStore", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newTestTxStore(t) })
	})
	t.Run("TxStore transactions", func(t *testing.T) {
		storetest.RunTx(t, func(t *testing.T) store.TxStore { return newTestTxStore(t) })
	})
	t.Run("Admin", func(t *testing.T) {
		storetest.RunAdmin(t, func(t *testing.T) store.Admin { return newTestStore(t) })
	})
	t.Run("Steps", func(t *testing.T) {
		storetest.RunSteps(t, func(t *testing.T) store.StepStore { return newTestStore(t) })
	})
	t.Run("Steps clientFoundRows interpolateParams", func(t *testing.T) {
		storetest.RunSteps(t, func(t *testing.T) store.StepStore { return newFoundRowsStore(t) })
	})
}

// newFoundRowsStore is newTestStore on a DSN with clientFoundRows and
// interpolateParams, under which an UPDATE that changes nothing still
// counts its row, and arguments are written into the statement.
func newFoundRowsStore(t *testing.T) *Store {
	t.Helper()
	cfg := testConfig(t)
	cfg.ClientFoundRows, cfg.InterpolateParams = true, true
	return newTestStoreOn(t, openDB(t, cfg, 8))
}

func TestNamesAreValidated(t *testing.T) {
	for _, bad := range []string{"", "Keys", "1keys", "keys; DROP TABLE x", "ke`ys", "k-eys", strings.Repeat("k", 51)} {
		want := fmt.Sprintf("mysqlstore: WithTable expects a name matching ^[a-z_][a-z0-9_]{0,49}$, got %q", bad)
		assert.PanicsWithValue(t, want, func() { WithTable(bad) }, bad)
	}
	assert.NotPanics(t, func() { WithTable(strings.Repeat("k", 50)) })
	assert.PanicsWithValue(t, "mysqlstore: New expects a non-nil db", func() { New(nil) })
}
