package sqlitestore

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"
)

// encodeHeader flattens h for the header BLOB column: for each value, in
// order and names sorted, the name's length as a uvarint, the name, the
// value's length as a uvarint, and the value. Every byte of a value is
// kept, valid UTF-8 or not. A nil h is stored as NULL, an empty one as an
// empty BLOB.
func encodeHeader(h http.Header) []byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	b := []byte{}
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

// errBadHeader means a header column holds bytes encodeHeader did not write.
var errBadHeader = errors.New("stored header is malformed")

// decodeHeader reverses encodeHeader; names are kept as stored.
func decodeHeader(b []byte) (http.Header, error) {
	if b == nil {
		return nil, nil
	}
	h := http.Header{}
	for len(b) > 0 {
		var name, value []byte
		var ok bool
		if name, b, ok = cut(b); !ok {
			return nil, errBadHeader
		}
		if value, b, ok = cut(b); !ok {
			return nil, errBadHeader
		}
		h[string(name)] = append(h[string(name)], string(value))
	}
	return h, nil
}

// cut splits one length-prefixed field off the front of b.
func cut(b []byte) (field, rest []byte, ok bool) {
	n, size := binary.Uvarint(b)
	if size <= 0 || n > uint64(len(b)-size) {
		return nil, nil, false
	}
	b = b[size:]
	return b[:n], b[n:], true
}
