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

// Fingerprint is the default request fingerprint: XXH64 of the method, the
// path with its query, the Content-Type header and the body, in hex. A
// second request with the same key and another fingerprint gets 422. It is
// not cryptographic: a client knowing another's key and body could forge a
// match. Keeping callers apart is WithScope's job; use FingerprintSHA256
// where forgery matters.
func Fingerprint(r *http.Request, body []byte) string {
	var text [16]byte
	return string(appendFingerprint(text[:0], r, body))
}

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

// FingerprintSHA256 hashes what Fingerprint does with SHA-256, so no two
// requests can be made to look alike, at a higher cost. Pass it to
// WithFingerprint. Switching between it and Fingerprint makes duplicates
// of requests recorded before the switch get 422.
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

// appendRequestFields appends the length-prefixed fields a fingerprint
// covers besides the body, then the body's length. These bytes must never
// change: stored fingerprints depend on them.
func appendRequestFields(buf []byte, r *http.Request, bodyLen int) []byte {
	buf = appendFields(buf, r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"))
	return binary.AppendUvarint(buf, uint64(bodyLen))
}

type hasher struct {
	sum    hash.Hash
	fields []byte
	out    [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{sum: sha256.New()} }}

// appendFields appends each field prefixed with its uvarint length, so no
// two lists give the same bytes.
func appendFields(buf []byte, fields ...string) []byte {
	for _, f := range fields {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

func hexString(sum []byte) string {
	var text [2 * sha256.Size]byte
	n := hex.Encode(text[:], sum)
	return string(text[:n])
}
