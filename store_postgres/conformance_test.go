package pgstore

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConformance runs the shared store suite, each subtest on its own
// table.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newTestStore(t) })
}
