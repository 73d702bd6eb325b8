package redisstore

import (
	"encoding/binary"
	"errors"
	"maps"
	"net/http"
	"slices"
)

// encodeHeader writes h as (name, value) pairs, names sorted and each
// name's values in their order, every string preceded by its length as a
// uvarint. Any bytes round-trip, and names are kept as written, canonical
// or not. An empty or nil header encodes to no bytes.
func encodeHeader(h http.Header) []byte {
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

var errCorruptHeader = errors.New("redisstore: stored header is corrupt")

// decodeHeader reads what encodeHeader wrote. No bytes decode to a nil
// header.
func decodeHeader(b []byte) (http.Header, error) {
	var h http.Header
	for len(b) > 0 {
		name, rest, ok := cutString(b)
		if !ok {
			return nil, errCorruptHeader
		}
		value, rest, ok := cutString(rest)
		if !ok {
			return nil, errCorruptHeader
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
