package httpx

import (
	"errors"
	"net/http"
	"strings"
)

// KeyHeader is the request header that carries the idempotency key unless
// the application names another, in its canonical form.
const KeyHeader = "Idempotency-Key"

// MaxKeyLen is the longest key ParseKey accepts, in bytes, after unquoting.
const MaxKeyLen = 255

// Errors returned by ParseKey and ParseKeyHeader. Their messages name the
// problem without echoing the client's input, so they are safe to show to
// a client.
var (
	// ErrKeyMissing means the request has no key header line.
	ErrKeyMissing = errors.New("missing Idempotency-Key header")
	// ErrKeyMultiple means the request has two or more key header lines.
	ErrKeyMultiple = errors.New("more than one Idempotency-Key header")
	// ErrKeyInvalid means the key header is present once but its value is
	// not a valid key.
	ErrKeyInvalid = errors.New("malformed Idempotency-Key header")
)

// ParseKey returns the idempotency key from the one Idempotency-Key line in
// h, as ParseKeyHeader does for a header of another name.
func ParseKey(h http.Header) (string, error) {
	return ParseKeyHeader(h, KeyHeader)
}

// ParseKeyHeader returns the idempotency key from the one line of the
// header name (in canonical form, as http.CanonicalHeaderKey gives it) in
// h: ErrKeyMissing without one, ErrKeyMultiple with several, ErrKeyInvalid
// for a malformed value. Spaces and tabs around the value are trimmed. The
// value is either bare (abc-123, as Stripe clients send it: 1..255 bytes of
// visible ASCII, 0x21..0x7E) or an RFC 8941 string ("abc-123", as the IETF
// draft specifies; any value starting with a double quote): between the
// quotes 0x20..0x7E, with \" and \\ the only escapes and nothing after the
// closing quote; the unescaped key must be 1..255 bytes. Both forms name
// the same key. A valid key without escapes is returned without allocating.
func ParseKeyHeader(h http.Header, name string) (string, error) {
	lines := h[name]
	switch {
	case len(lines) == 0:
		return "", ErrKeyMissing
	case len(lines) > 1:
		return "", ErrKeyMultiple
	}
	v := strings.Trim(lines[0], " \t")
	if strings.HasPrefix(v, `"`) {
		return parseQuotedKey(v)
	}
	if len(v) == 0 || len(v) > MaxKeyLen {
		return "", ErrKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7E {
			return "", ErrKeyInvalid
		}
	}
	return v, nil
}

// parseQuotedKey parses v, which starts with a double quote, as an RFC 8941
// sf-string that must end at the end of v, and returns its unescaped content.
func parseQuotedKey(v string) (string, error) {
	escapes := 0
	i := 1
	for ; i < len(v); i++ {
		c := v[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", ErrKeyInvalid
			}
			escapes++
			continue
		}
		if c < 0x20 || c > 0x7E {
			return "", ErrKeyInvalid
		}
	}
	// i is at the closing quote, which must be the last byte.
	if i != len(v)-1 {
		return "", ErrKeyInvalid
	}
	content := v[1:i]
	if n := len(content) - escapes; n == 0 || n > MaxKeyLen {
		return "", ErrKeyInvalid
	}
	if escapes == 0 {
		return content, nil
	}
	var b strings.Builder
	b.Grow(len(content) - escapes)
	for j := 0; j < len(content); j++ {
		if content[j] == '\\' {
			j++
		}
		b.WriteByte(content[j])
	}
	return b.String(), nil
}
