package idempotency

import "encoding/binary"

// storageKey is the key a record is stored under: scope, method, route and
// the client's key, each prefixed with its length (see appendFields), so
// that no two combinations give the same bytes, and a zero after them.
// The memory store keeps records under these bytes as they are, up to 63
// of them; a store that keeps keys outside the process keeps them under
// their SHA-256 (store.HashKey), so these bytes must never change: every
// record stored would be orphaned, and its duplicates run again. Fields
// that fit are gathered in a buffer on the stack.
func storageKey(scope, method, route, clientKey string) string {
	var scratch [256]byte
	return string(appendStorageKey(scratch[:0], scope, method, route, clientKey))
}

// appendStorageKey appends storageKey's bytes to buf.
func appendStorageKey(buf []byte, scope, method, route, clientKey string) []byte {
	buf = appendFields(buf, scope, method, route, clientKey)
	return binary.AppendUvarint(buf, 0)
}
