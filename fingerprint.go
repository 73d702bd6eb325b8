package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint is the default request fingerprint: a 64-bit xxHash (XXH64)
// of the method, the path with its query, the Content-Type header and the
// body, in hex. Two requests with the same key and different fingerprints
// are different requests: the second gets 422.
//
// The fingerprint is only ever compared with the one stored under the same
// storage key, so it tells a client's retry from a client's mistake (a key
// reused for another request), where two different requests look alike
// once in 2^64. It is fast (about 0.1 µs per KiB of body) and not
// cryptographic: a client that knows another request's exact body and key
// could build a body that looks alike on purpose. Keeping callers apart is
// the scope's job (WithScope), not the fingerprint's; where it must also
// hold against such a client, use FingerprintSHA256.
func Fingerprint(r *http.Request, body []byte) string {
	var text [16]byte
	return string(appendFingerprint(text[:0], r, body))
}

// appendFingerprint appends Fingerprint's text to buf.
func appendFingerprint(buf []byte, r *http.Request, body []byte) []byte {
	var scratch [256]byte
	fields := appendRequestFields(scratch[:0], r, len(body))
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(fields)
	_, _ = d.Write(body)
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], d.Sum64())
	return hex.AppendEncode(buf, sum[:])
}

// FingerprintSHA256 hashes what Fingerprint does with SHA-256: no two
// different requests can be made to look alike, even on purpose, at about
// ten times Fingerprint's cost on a body (0.6 to 1.3 µs per KiB with the
// CPU's SHA instructions, more without). Pass it to WithFingerprint. Its
// fingerprints are those of the earlier default, which was SHA-256, byte
// for byte, so a deployment that passes it keeps replaying what that
// default recorded. Switching between it and Fingerprint makes a duplicate
// of a request recorded before the switch get 422.
func FingerprintSHA256(r *http.Request, body []byte) string {
	h := hashers.Get().(*hasher)
	h.fields = appendRequestFields(h.fields[:0], r, len(body))
	h.sum.Reset()
	h.sum.Write(h.fields)
	h.sum.Write(body)
	h.sum.Sum(h.out[:0])
	fingerprint := hexString(h.out[:])
	hashers.Put(h)
	return fingerprint
}

// appendRequestFields appends what a fingerprint covers besides the body,
// which is hashed after them: the method, the path with its query and the
// Content-Type header, each prefixed with its length, then the body's
// length. (The body, hashed last, needs no length; it is there because
// FingerprintSHA256 hashes exactly what the SHA-256 default before it did.)
func appendRequestFields(buf []byte, r *http.Request, bodyLen int) []byte {
	buf = appendFields(buf, r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"))
	return binary.AppendUvarint(buf, uint64(bodyLen))
}

// hasher is a reusable SHA-256 state with a scratch buffer for the
// length-prefixed fields.
type hasher struct {
	sum    hash.Hash
	fields []byte
	out    [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{sum: sha256.New()} }}

// appendFields appends each field to buf, preceded by its length as a
// uvarint, so that no two lists of fields give the same bytes.
func appendFields(buf []byte, fields ...string) []byte {
	for _, f := range fields {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

// hexString returns sum, a hash, in hex.
func hexString(sum []byte) string {
	var text [2 * sha256.Size]byte
	n := hex.Encode(text[:], sum)
	return string(text[:n])
}
