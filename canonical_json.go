package idempotency

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// canonicalJSON returns body re-encoded with object keys sorted and
// insignificant whitespace removed, when the request says it is JSON and
// the body is one JSON value that decoding keeps whole (see
// decodedWhole); otherwise it returns body unchanged. Numbers keep their
// literal form.
func canonicalJSON(r *http.Request, body []byte) []byte {
	if !isJSON(r.Header.Get("Content-Type")) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return body
	}
	if _, err := dec.Token(); err != io.EOF {
		return body // trailing data: not one JSON value
	}
	if !decodedWhole(v, body) {
		return body
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return canonical
}

func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// decodedWhole reports whether v, decoded from body, holds all of it, so
// that two bodies decoding to one value are one request. Decoding keeps
// only the last value of a member named twice in one object, which leaves
// v with fewer members than body has name separators; and it reads invalid
// UTF-8, lone surrogate escapes and U+FFFD itself alike, as U+FFFD, which
// may then stand for many different bodies.
func decodedWhole(v any, body []byte) bool {
	members, ok := countMembers(v)
	return ok && members == nameSeparators(body)
}

// countMembers returns the number of object members in v, counted at
// every depth, and false if any member name or string in v holds U+FFFD.
func countMembers(v any) (int, bool) {
	switch v := v.(type) {
	case map[string]any:
		n := len(v)
		for name, member := range v {
			m, ok := countMembers(member)
			if !ok || strings.ContainsRune(name, utf8.RuneError) {
				return 0, false
			}
			n += m
		}
		return n, true
	case []any:
		n := 0
		for _, element := range v {
			m, ok := countMembers(element)
			if !ok {
				return 0, false
			}
			n += m
		}
		return n, true
	case string:
		return 0, !strings.ContainsRune(v, utf8.RuneError)
	default:
		return 0, true
	}
}

// nameSeparators counts the colons outside strings in body, a valid JSON
// text: one for each object member.
func nameSeparators(body []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case c == ':' && !inString:
			n++
		}
	}
	return n
}
