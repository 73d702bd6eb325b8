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
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	var text [32]byte
	hex.Encode(text[:], raw[:])
	return string(text[:])
}
