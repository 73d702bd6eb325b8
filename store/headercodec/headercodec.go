// Package headercodec turns an http.Header into bytes a store can keep,
// and back: for each value, names sorted and each name's values in their
// order, the name and then the value, each after its length as a uvarint.
// Every byte of a name or value round-trips, and names keep their
// spelling, canonical or not.
package headercodec

import (
	"encoding/binary"
	"errors"
	"maps"
	"net/http"
	"slices"
)

// ErrCorrupt means the bytes given to Decode are not what Encode writes.
var ErrCorrupt = errors.New("stored header is corrupt")

// Encode returns h's bytes. A header without values, nil or not, encodes
// to none (nil); a name without values is dropped.
func Encode(h http.Header) []byte {
	var b []byte
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, value := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.AppendUvarint(b, uint64(len(value)))
			b = append(b, value...)
		}
	}
	return b
}

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
