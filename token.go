package idempotency

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// newToken returns a fresh owner token: 128 random bits in hex. Tokens must
// be unique, not secret, so the runtime's ChaCha8 generator serves.
func newToken() string {
	var text [tokenLen]byte
	return string(appendToken(text[:0]))
}

const tokenLen = 32

func appendToken(buf []byte) []byte {
	var raw [tokenLen / 2]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	return hex.AppendEncode(buf, raw[:])
}
