package idempotency

import (
	"mime"
	"net/http"
	"strings"

	"github.com/seed43327c4c/idempotency/internal/canonjson"
)

// canonicalJSON returns body in canonjson's canonical form when r says it
// is JSON (see isJSON), and body itself otherwise.
func canonicalJSON(r *http.Request, body []byte) []byte {
	if !isJSON(r.Header.Get("Content-Type")) {
		return body
	}
	return canonjson.Canonical(body)
}

// isJSON reports whether contentType names JSON: application/json, or a
// media type ending in +json (application/problem+json, say).
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}
