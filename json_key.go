package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

var (
	errNotJSONObject   = errors.New("idempotency: the body is not a JSON object")
	errKeyMemberTwice  = errors.New("idempotency: the body names the key member twice, or in another letter case")
	errKeyMemberNotKey = errors.New("idempotency: the key member is not a string or a number")
	errKeyMemberEmpty  = errors.New("idempotency: the key member is an empty string")
)

// KeyFromJSONField returns a key function for WithKeyFunc that reads the
// top-level member name of a JSON object body: a string's value, or a
// number's text as sent. The member absent or null gives no key; an empty
// string is an error, as an empty header is. A body that
// is not a JSON object, a member of another type, or a name that matches in
// another letter case (as encoding/json would match it) is an error. Nested
// values are skipped, not decoded. It panics if name is empty.
func KeyFromJSONField(name string) func(r *http.Request, body []byte) (string, error) {
	if name == "" {
		panic("idempotency: KeyFromJSONField expects a member name")
	}
	return func(_ *http.Request, body []byte) (string, error) {
		return jsonMember(body, name)
	}
}

// jsonMember returns the key in member name of the JSON object body.
func jsonMember(body []byte, name string) (string, error) {
	s := jsonScanner{b: body}
	if !s.consume('{') {
		return "", errNotJSONObject
	}
	var found []byte // the value's raw text
	matches := 0
	for first := true; !s.consume('}'); first = false {
		if !first && !s.consume(',') {
			return "", errNotJSONObject
		}
		s.space()
		member, ok := s.str()
		if !ok || !s.consume(':') {
			return "", errNotJSONObject
		}
		s.space()
		start := s.i
		if !s.value() {
			return "", errNotJSONObject
		}
		if exact, fold := nameMatches(member, name); fold {
			matches++
			if !exact || matches > 1 {
				return "", errKeyMemberTwice
			}
			found = body[start:s.i]
		}
	}
	s.space()
	if s.i != len(body) {
		return "", errNotJSONObject
	}
	switch {
	case found == nil || string(found) == "null":
		return "", nil
	case string(found) == `""`:
		return "", errKeyMemberEmpty
	case found[0] == '"':
		return jsonString(found)
	case (found[0] == '-' || found[0] >= '0' && found[0] <= '9') && json.Valid(found):
		return string(found), nil
	}
	return "", errKeyMemberNotKey
}

// nameMatches reports whether the quoted member names name exactly, and
// whether it does in any letter case.
func nameMatches(member []byte, name string) (exact, fold bool) {
	if plainJSONString(member) {
		inner := member[1 : len(member)-1]
		return string(inner) == name, bytes.EqualFold(inner, []byte(name))
	}
	decoded, err := jsonString(member)
	return err == nil && decoded == name, err == nil && strings.EqualFold(decoded, name)
}

// jsonString decodes quoted, a JSON string, as encoding/json does.
func jsonString(quoted []byte) (string, error) {
	if plainJSONString(quoted) {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var s string
	err := json.Unmarshal(quoted, &s)
	return s, err
}

// plainJSONString reports whether quoted holds printable ASCII and no
// escape, and so means its bytes between the quotes.
func plainJSONString(quoted []byte) bool {
	for _, c := range quoted[1 : len(quoted)-1] {
		if c < 0x20 || c > 0x7E || c == '\\' {
			return false
		}
	}
	return true
}

// jsonScanner walks a JSON text without decoding it. It checks only what
// finding a top-level member needs: a body it accepts that is not JSON is
// left for the handler to refuse.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// consume skips space and then c, reporting whether c was there.
func (s *jsonScanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str skips the string at s.i and returns it, quotes included.
func (s *jsonScanner) str() ([]byte, bool) {
	start := s.i
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return s.b[start:s.i], true
		}
	}
	return nil, false
}

// value skips the value at s.i: a string, an object or array with all it
// holds, or a number or literal.
func (s *jsonScanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		return s.nested()
	}
	start := s.i
	for s.i < len(s.b) && !strings.ContainsRune(",}] \t\r\n", rune(s.b[s.i])) {
		s.i++
	}
	return s.i > start
}

// nested skips the object or array at s.i, counting brackets outside
// strings.
func (s *jsonScanner) nested() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		s.i++
		if depth == 0 {
			return true
		}
	}
	return false
}
