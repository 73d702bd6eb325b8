package sqlitestore

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
		{"four handles", func(t *testing.T) store.Store {
			path := testFile(t)
			s := &spread{}
			for range 4 {
				s.stores = append(s.stores, newTestStoreOn(t, path))
			}
			return s
		}},
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
