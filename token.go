package idempotency

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// newToken returns a fresh owner token: 128 random bits in hex. Tokens tell
// one claim of a key from another and are never shown to clients, so they
// must be unique, not secret; the runtime's per-thread ChaCha8 generator,
// seeded from the operating system, gives that without a system call.
func newToken() string {
	var text [tokenLen]byte
	return string(appendToken(text[:0]))
}

// tokenLen is the length of a token.
const tokenLen = 32

// appendToken appends a fresh token, as newToken returns one, to buf.
func appendToken(buf []byte) []byte {
	var raw [tokenLen / 2]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	return hex.AppendEncode(buf, raw[:])
}
