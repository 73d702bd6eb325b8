package pgstore

import (
	"net/http"
	"sort"
)

// encodeHeader flattens h into name, value, name, value, ... for the
// header bytea[] column, names sorted. bytea keeps every byte of a value,
// valid UTF-8 or not. A nil h is stored as NULL, an empty one as {}.
func encodeHeader(h http.Header) [][]byte {
	if h == nil {
		return nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	pairs := make([][]byte, 0, 2*len(h))
	for _, name := range names {
		for _, value := range h[name] {
			pairs = append(pairs, []byte(name), []byte(value))
		}
	}
	return pairs
}

// decodeHeader reverses encodeHeader; names are kept as stored.
func decodeHeader(pairs [][]byte) http.Header {
	if pairs == nil {
		return nil
	}
	h := make(http.Header, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		name := string(pairs[i])
		h[name] = append(h[name], string(pairs[i+1]))
	}
	return h
}
