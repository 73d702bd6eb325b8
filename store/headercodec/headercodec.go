// Package headercodec turns an http.Header into bytes a store can keep,
// and back: for each value, names sorted and each name's values in their
// order, the name and then the value, each after its length as a uvarint.
// Every byte of a name or value round-trips, and names keep their
// spelling, canonical or not.
package headercodec

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net/http"
	"slices"
)

// ErrCorrupt means the bytes given to Decode are not what Encode writes.
var ErrCorrupt = errors.New("stored header is corrupt")

// Encode returns h's bytes. A header without values, nil or not, encodes
// to none (nil); a name without values is dropped.
func Encode(h http.Header) []byte {
	var room [16]string // the names of most responses, without an allocation
	names, size := room[:0], 0
	for name, values := range h {
		names = append(names, name)
		for _, value := range values {
			size += uvarintLen(len(name)) + len(name) + uvarintLen(len(value)) + len(value)
		}
	}
	if size == 0 {
		return nil
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	for _, name := range names {
		for _, value := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.AppendUvarint(b, uint64(len(value)))
			b = append(b, value...)
		}
	}
	return b
}

// uvarintLen is the length of n written by binary.AppendUvarint.
func uvarintLen(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

// Decode returns the header Encode wrote as b, or ErrCorrupt. No bytes
// decode to a nil header.
func Decode(b []byte) (http.Header, error) {
	var h http.Header
	for len(b) > 0 {
		name, rest, ok := cutString(b)
		if !ok {
			return nil, ErrCorrupt
		}
		value, rest, ok := cutString(rest)
		if !ok {
			return nil, ErrCorrupt
		}
		if h == nil {
			h = make(http.Header)
		}
		h[name] = append(h[name], value)
		b = rest
	}
	return h, nil
}

// cutString reads one length-prefixed string from the front of b.
func cutString(b []byte) (s string, rest []byte, ok bool) {
	n, size := binary.Uvarint(b)
	if size <= 0 || n > uint64(len(b)-size) {
		return "", nil, false
	}
	end := size + int(n)
	return string(b[size:end]), b[end:], true
}
