package sqlitestore

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestSteps runs the steps suite against the plain store and against the
// transactional one, whose plain methods share the table.
func TestSteps(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		storetest.RunSteps(t, func(t *testing.T) store.StepStore { return newTestStore(t) })
	})
	t.Run("transactional", func(t *testing.T) {
		storetest.RunSteps(t, func(t *testing.T) store.StepStore { return newTestTxStore(t) })
	})
}
