package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStorageKeyLayout: the storage key of a POST to /payments with key
// k-1 in scope tenant-1 is the SHA-256, in hex, of each field after its
// length, then a zero. Records already stored under such keys must stay
// reachable, so this layout must never change.
func TestStorageKeyLayout(t *testing.T) {
	sum := sha256.Sum256([]byte("\x08tenant-1\x04POST\x09/payments\x03k-1\x00"))
	require.Equal(t, hex.EncodeToString(sum[:]), storageKey("tenant-1", "POST", "/payments", "k-1"))
	require.NotEqual(t, storageKey("tenant-1", "POST", "/payments", "k-1"), storageKey("tenant-", "1POST", "/payments", "k-1"),
		"fields that would run together without their lengths")
}
