package stepcodec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestRoundTrip: steps of every shape come back from their bytes as
// appended; bytes cut anywhere are an error, never other steps.
func TestRoundTrip(t *testing.T) {
	steps := []store.Step{
		{Name: "charge", Result: []byte(`{"id":"ch_1"}`)},
		{Name: "", Result: []byte{}},
		{Name: "email", Result: []byte("mailbox full"), Failed: true},
	}
	var encoded []byte
	for _, step := range steps {
		encoded = Append(encoded, step)
	}
	got, err := Decode(encoded)
	require.NoError(t, err)
	assert.Equal(t, steps, got)
	for cut := 1; cut < len(encoded); cut++ {
		if got, err := Decode(encoded[:cut]); err == nil {
			// A cut between two steps is a shorter list, never other steps.
			assert.Equal(t, steps[:len(got)], got, "cut at %d", cut)
		}
	}
	_, err = Decode([]byte{1, 'x', 7, 0})
	require.ErrorIs(t, err, ErrCorrupt, "an unknown flag")
}
