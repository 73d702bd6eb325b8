package httpx

import (
	"net/http"
	"slices"
	"strings"
)

// trailerNames returns the names of the trailers a response has, in
// canonical form: those sent, the header it was sent with, declares in its
// Trailer header, and those final, the header map as its handler left it,
// holds under http.TrailerPrefix. net/http sends both kinds after the body,
// from the values final holds. It returns nil, allocating nothing, for a
// response without trailers.
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

// addsTrailers reports whether a response has a trailer (see trailerNames)
// beyond outer, those it had before its handler ran: set by a middleware
// outside, which sets them again on a replay.
func addsTrailers(outer []string, sent, final http.Header) bool {
	for _, name := range trailerNames(sent, final) {
		if !slices.Contains(outer, name) {
			return true
		}
	}
	return false
}
