package store_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

func TestMemoryAdminConformance(t *testing.T) {
	storetest.RunAdmin(t, func(*testing.T) store.Admin { return store.NewMemory() })
}

// TestMemoryAdminKeyLengths: keys kept as they are (up to 63 bytes) and
// keys kept as their hash are found, inspected and deleted alike.
func TestMemoryAdminKeyLengths(t *testing.T) {
	m := store.NewMemory()
	for _, n := range []int{1, 63, 64, 300} {
		key := strings.Repeat("k", n)
		rec, claimed, err := m.Claim(t.Context(), key, "fp", "token", lease)
		require.NoError(t, err)
		require.True(t, claimed)
		hash := store.HashKey(key)

		found, err := m.Find(t.Context(), hash[:16], 2)
		require.NoError(t, err)
		require.Equal(t, []string{hash}, found, "key of %d bytes", n)
		got, ok, err := m.Inspect(t.Context(), hash)
		require.NoError(t, err)
		require.True(t, ok, "key of %d bytes", n)
		require.Equal(t, rec.Owner.Fence, got.Owner.Fence)
		deleted, err := m.Delete(t.Context(), hash, true)
		require.NoError(t, err)
		require.True(t, deleted, "key of %d bytes", n)
	}
}
