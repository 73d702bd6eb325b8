package storetest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTogether: every f(i) runs once, and all run at once: each waits
// until all the others have started.
func TestTogether(t *testing.T) {
	const n = 16
	var ran [n]atomic.Int32
	var started, alone atomic.Int32
	Together(n, func(i int) {
		started.Add(1)
		for deadline := time.Now().Add(5 * time.Second); started.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				alone.Add(1)
				break
			}
		}
		ran[i].Add(1)
	})
	require.Zero(t, alone.Load(), "calls that waited 5 s for the others in vain")
	for i := range ran {
		require.EqualValues(t, 1, ran[i].Load(), "f(%d)", i)
	}
}
