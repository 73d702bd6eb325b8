package sqlitestore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestStepsEncoding: steps of every shape come back from their column's
// bytes as saved; bytes cut anywhere are an error, never other steps.
func TestStepsEncoding(t *testing.T) {
	steps := []store.Step{
		{Name: "charge", Result: []byte(`{"id":"ch_1"}`)},
		{Name: "", Result: []byte{}},
		{Name: "email", Result: []byte("mailbox full"), Failed: true},
	}
	var encoded []byte
	for _, step := range steps {
		encoded = encodeStep(encoded, step)
	}
	got, err := decodeSteps(encoded)
	require.NoError(t, err)
	assert.Equal(t, steps, got)
	for cut := 1; cut < len(encoded); cut++ {
		if got, err := decodeSteps(encoded[:cut]); err == nil {
			// A cut between two steps is a shorter list, never other steps.
			assert.Equal(t, steps[:len(got)], got, "cut at %d", cut)
		}
	}
	_, err = decodeSteps([]byte{1, 'x', 7, 0})
	require.ErrorContains(t, err, "not one sqlitestore encoded", "an unknown flag")
}
