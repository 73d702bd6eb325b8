package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestStorageKeyLayout: the storage key of a POST to /payments with key
// k-1 in scope tenant-1 is each field after its length, then a zero, and
// a store that hashes keys (store.HashKey) keeps its record under the
// SHA-256 of those bytes, in hex. Records already stored under such keys
// must stay reachable, so this layout must never change. Fields that
// would run together without their lengths give different keys, and a
// key longer than the stack buffer is whole.
func TestStorageKeyLayout(t *testing.T) {
	const fields = "\x08tenant-1\x04POST\x09/payments\x03k-1\x00"
	require.Equal(t, fields, storageKey("tenant-1", "POST", "/payments", "k-1"))
	sum := sha256.Sum256([]byte(fields))
	require.Equal(t, hex.EncodeToString(sum[:]), store.HashKey(storageKey("tenant-1", "POST", "/payments", "k-1")))

	require.NotEqual(t, storageKey("tenant-1", "POST", "/payments", "k-1"), storageKey("tenant-", "1POST", "/payments", "k-1"))
	long := strings.Repeat("k", 300)
	require.Equal(t, "\x00\x04POST\x01/\xac\x02"+long+"\x00", storageKey("", "POST", "/", long))

}
