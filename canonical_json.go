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
// decodesExactly); otherwise it returns body unchanged. Numbers keep their
// literal form.
func canonicalJSON(r *http.Request, body []byte) []byte {
	if !isJSON(r.Header.Get("Content-Type")) || !decodesExactly(body) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
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

// decodesExactly reports whether body is exactly one JSON value that
// decoding keeps whole, so that two bodies decoding to one value are one
// request: no object names a member twice (decoding keeps only the last
// value), and no string holds U+FFFD, which decoding makes of invalid UTF-8
// and of lone surrogate escapes alike, so that one U+FFFD could stand for
// many different bodies.
func decodesExactly(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// open holds one entry per object or array being read, innermost last:
	// the member names an object has had so far, nil for an array.
	var open []map[string]bool
	wantName := false // the next token names a member of the innermost object
	done := false     // the top-level value has been read
	valueRead := func() {
		done = len(open) == 0
		wantName = !done && open[len(open)-1] != nil
	}
	for {
		tok, err := dec.Token()
		switch {
		case err == io.EOF:
			return done
		case err != nil, done:
			return false
		}
		if wantName {
			name, ok := tok.(string)
			if !ok { // the object's closing brace
				open = open[:len(open)-1]
				valueRead()
				continue
			}
			names := open[len(open)-1]
			if names[name] || strings.ContainsRune(name, utf8.RuneError) {
				return false
			}
			names[name] = true
			wantName = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, map[string]bool{})
			wantName = true
		case json.Delim('['):
			open = append(open, nil)
		case json.Delim(']'):
			open = open[:len(open)-1]
			valueRead()
		default:
			if s, ok := tok.(string); ok && strings.ContainsRune(s, utf8.RuneError) {
				return false
			}
			valueRead()
		}
	}
}
