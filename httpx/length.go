package httpx

import (
	"net/http"
	"strconv"
	"strings"
)

// declaredLength returns the body length header declares in its one
// Content-Length, and whether it declares one that net/http would frame
// the response by.
func declaredLength(header http.Header) (int64, bool) {
	values := header["Content-Length"]
	if len(values) != 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(values[0]), 10, 64)
	return n, err == nil && n >= 0
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// shortOfDeclared reports whether a body of written bytes, with status
// and header, is shorter than the Content-Length header declares: net/http
// then ends the connection instead of the response, and the client gets
// a body cut short.
func shortOfDeclared(status int, header http.Header, written int64) bool {
	n, ok := declaredLength(header)
	return ok && bodyAllowed(status) && written < n
}
