package idempotency

import "encoding/binary"

// StorageKey returns the key the middleware stores a request's record
// under: the scope (WithScope's, "" without one), the method, the route
// (WithRoute's, else the path as sent, decoded) and the client's key, as
// parsed from its header. Shared stores file it under store.HashKey of it.
func StorageKey(scope, method, route, clientKey string) string {
	var scratch [256]byte
	return string(appendStorageKey(scratch[:0], scope, method, route, clientKey))
}

// DoStorageKey returns the key Do stores the job of key under, in scope
// (DoScope's, "" without one). Its method is empty, which no protected
// request has, so it never meets a request's.
func DoStorageKey(scope, key string) string {
	return StorageKey(scope, "", "idempotency.Do", key)
}

// appendStorageKey appends the fields, each after its length, then a zero,
// so no two combinations collide. Stores keep these bytes (or their
// SHA-256), so they must never change: every stored record would be
// orphaned and its duplicates run again.
func appendStorageKey(buf []byte, scope, method, route, clientKey string) []byte {
	buf = appendFields(buf, scope, method, route, clientKey)
	return binary.AppendUvarint(buf, 0)
}
