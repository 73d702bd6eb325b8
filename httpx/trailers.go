package httpx

import (
	"net/http"
	"strings"
)

// hasTrailers reports whether a response has trailers: sent, the header it
// was sent with, declares some in a Trailer header, or final, the header
// map as its handler left it, holds a name under http.TrailerPrefix. Either
// way net/http sends them after the body, from the values final holds.
func hasTrailers(sent, final http.Header) bool {
	for _, declared := range sent["Trailer"] {
		if strings.Trim(declared, " \t,") != "" {
			return true
		}
	}
	for name := range final {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}
