package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sync"
)

// Fingerprint is the default request fingerprint: a SHA-256 hash of the
// method, the path with its query, the Content-Type header and the body.
// Two requests with the same key and different fingerprints are different
// requests: the second gets 422.
func Fingerprint(r *http.Request, body []byte) string {
	return hashFields(body, r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"))
}

// storageKey is the key a record is stored under: scope, method, route and
// the client's key, each length-prefixed so no two combinations collide,
// hashed to a fixed-size string that is safe in any store. Fields that fit
// are hashed from a buffer on the stack.
func storageKey(scope, method, route, clientKey string) string {
	var scratch [256]byte
	fields := appendFields(scratch[:0], scope, method, route, clientKey)
	fields = binary.AppendUvarint(fields, 0) // no tail
	sum := sha256.Sum256(fields)
	return hexString(sum[:])
}

// hasher is a reusable SHA-256 state with a scratch buffer for the
// length-prefixed fields.
type hasher struct {
	sum    hash.Hash
	fields []byte
	out    [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{sum: sha256.New()} }}

// hashFields hashes the fields and then tail, each prefixed with its
// length, and returns the hash in hex. The tail (a request body) is hashed
// where it lies, not copied.
func hashFields(tail []byte, fields ...string) string {
	h := hashers.Get().(*hasher)
	buf := appendFields(h.fields[:0], fields...)
	buf = binary.AppendUvarint(buf, uint64(len(tail)))
	h.sum.Reset()
	h.sum.Write(buf)
	h.sum.Write(tail)
	h.sum.Sum(h.out[:0])
	key := hexString(h.out[:])
	h.fields = buf
	hashers.Put(h)
	return key
}

// appendFields appends each field to buf, preceded by its length as a
// uvarint, so that no two lists of fields give the same bytes.
func appendFields(buf []byte, fields ...string) []byte {
	for _, f := range fields {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// hexString returns a SHA-256 sum in hex.
func hexString(sum []byte) string {
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum)
	return string(text[:])
}
