package idempotency

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokensAreDistinctAcrossGoroutines(t *testing.T) {
	const goroutines, each = 8, 5000
	var mu sync.Mutex
	seen := make(map[string]bool, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			local := make([]string, each)
			for i := range local {
				local[i] = newToken()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, tok := range local {
				require.Len(t, tok, 32)
				require.False(t, seen[tok], "duplicate token %s", tok)
				seen[tok] = true
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, goroutines*each)
}
