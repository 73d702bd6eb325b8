package httpx

import (
	"net/http"
	"strconv"
	"strings"
)

// declaredLength returns the body length header's one Content-Length
// declares, and whether net/http would frame the response by it.
func declaredLength(header http.Header) (int64, bool) {
	values := header["Content-Length"]
	if len(values) != 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(values[0]), 10, 64)
	return n, err == nil && n >= 0
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// shortOfDeclared reports whether a body of written bytes is shorter than
// the Content-Length header declares.
func shortOfDeclared(status int, header http.Header, written int64) bool {
	n, ok := declaredLength(header)
	return ok && bodyAllowed(status) && written < n
}
