package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
)

// storageKey is the key a record is stored under: the fields of keyFields
// hashed with SHA-256, in hex, a fixed-size string that is safe in any
// store. Unlike the fingerprint, it keeps callers apart, so it is
// cryptographic: no key one caller sends can be made to land on another
// scope's record. Fields that fit are hashed from a buffer on the stack.
func storageKey(scope, method, route, clientKey string) string {
	var scratch [256]byte
	sum := sha256.Sum256(keyFields(scratch[:0], scope, method, route, clientKey))
	return hexString(sum[:])
}

// keyFields appends to buf what a storage key is made of: scope, method,
// route and the client's key, each prefixed with its length (see
// appendFields), so that no two combinations give the same bytes, and a
// zero after them. These bytes must never change: every stored record
// would be orphaned, and its duplicates run again.
func keyFields(buf []byte, scope, method, route, clientKey string) []byte {
	buf = appendFields(buf, scope, method, route, clientKey)
	return binary.AppendUvarint(buf, 0)
}
