package pgstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConformance runs the shared store suites, each subtest on its own
// table: Run against the plain store and against the plain methods of the
// transactional one, and RunTx against the transactional one's
// transactions.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Store", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t) })
		}},
		{"TxStore", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return newTestTxStore(t) })
		}},
		{"TxStore transactions", func(t *testing.T) {
			storetest.RunTx(t, func(t *testing.T) store.TxStore { return newTestTxStore(t) })
		}},
	} {
		t.Run(c.name, c.run)
	}
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
		replay:   cost{1, "claim"},
		reused:   cost{1, "claim"},
		conflict: cost{1, "claim"},
	})
}
