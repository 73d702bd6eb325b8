package sqlitestore

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestAdminConformance runs storetest.RunAdmin, each subtest on a file of
// its own.
func TestAdminConformance(t *testing.T) {
	storetest.RunAdmin(t, func(t *testing.T) store.Admin { return newTestStore(t) })
}
