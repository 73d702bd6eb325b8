package idempotency

import "encoding/binary"

// storageKey is the key a record is stored under: scope, method, route and
// client key, length-prefixed so no two combinations collide. Stores keep
// these bytes (or their SHA-256), so they must never change: every stored
// record would be orphaned and its duplicates run again.
func storageKey(scope, method, route, clientKey string) string {
	var scratch [256]byte
	return string(appendStorageKey(scratch[:0], scope, method, route, clientKey))
}

func appendStorageKey(buf []byte, scope, method, route, clientKey string) []byte {
	buf = appendFields(buf, scope, method, route, clientKey)
	return binary.AppendUvarint(buf, 0)
}
