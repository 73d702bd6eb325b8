package httpx

import (
	"net/http"
	"slices"
	"strings"
)

// trailerNames returns, in canonical form, the trailers a response has:
// those its sent header declares in Trailer, and those its final header
// holds under http.TrailerPrefix. It allocates nothing when there are none.
func trailerNames(sent, final http.Header) []string {
	var names []string
	for _, declared := range sent["Trailer"] {
		for name := range strings.SplitSeq(declared, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, http.CanonicalHeaderKey(name))
			}
		}
	}
	for name := range final {
		if trailer, ok := strings.CutPrefix(name, http.TrailerPrefix); ok {
			names = append(names, http.CanonicalHeaderKey(trailer))
		}
	}
	return names
}

// addsTrailers reports whether a response has a trailer beyond outer, those
// set by a middleware outside, which sets them again on a replay.
func addsTrailers(outer []string, sent, final http.Header) bool {
	for _, name := range trailerNames(sent, final) {
		if !slices.Contains(outer, name) {
			return true
		}
	}
	return false
}
