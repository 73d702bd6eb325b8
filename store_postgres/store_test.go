package pgstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// plainStore is what the suites on plain methods run against.
type plainStore interface {
	store.Watcher
	Close()
}

// plainStores are the stores whose plain methods the conformance suites
// run against, each on a table of its own: the plain store and the
// transactional one.
var plainStores = []struct {
	name     string
	newStore func(t *testing.T) plainStore
}{
	{"Store", func(t *testing.T) plainStore { return newTestStore(t) }},
	{"TxStore", func(t *testing.T) plainStore { return newTestTxStore(t) }},
}

// TestConformance runs the shared store suites: Run against each of
// plainStores, RunTx against the transactional store's transactions, and
// RunSteps against the plain store.
func TestConformance(t *testing.T) {
	for _, c := range plainStores {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return c.newStore(t) })
		})
	}
	t.Run("TxStore transactions", func(t *testing.T) {
		storetest.RunTx(t, func(t *testing.T) store.TxStore { return newTestTxStore(t) })
	})
	t.Run("Store steps", func(t *testing.T) {
		storetest.RunSteps(t, func(t *testing.T) store.StepStore { return newTestStore(t) })
	})
}

func TestNamesAreValidatedAndQuoted(t *testing.T) {
	for _, bad := range []string{"", "Keys", "1keys", "keys; DROP TABLE x", `ke"ys`, "k-eys", strings.Repeat("k", 51)} {
		want := fmt.Sprintf("pgstore: WithTable expects a name matching ^[a-z_][a-z0-9_]{0,49}$, got %q", bad)
		assert.PanicsWithValue(t, want, func() { WithTable(bad) }, bad)
		if len(bad) <= 50 {
			assert.Panics(t, func() { WithSchema(bad) }, bad)
		}
	}
	assert.NotPanics(t, func() { WithTable(strings.Repeat("k", 50)) })
	assert.NotPanics(t, func() { WithSchema(strings.Repeat("s", 63)) })
	assert.PanicsWithValue(t, "pgstore: New expects a non-nil pool", func() { New(nil) })
}

func TestRoundTripsPerRequest(t *testing.T) {
	// One connection, so the warm-up fills the only statement cache.
	rt := &roundTrips{}
	s := newTestStoreOn(t, countedPool(t, rt, 1))
	requireCosts(t, rt, s, nil, 1, requestCosts{
		first:    cost{2, "claim, complete"},
		replay:   cost{2, "claim of a new key, read of a live one"},
		reused:   cost{2, "claim of a new key, read of a live one"},
		conflict: cost{2, "claim of a new key, read of a live one"},
	})
}
