package httpx

import (
	"errors"
	"net/http"
	"strings"
)

// KeyHeader is the default request header carrying the idempotency key.
const KeyHeader = "Idempotency-Key"

// MaxKeyLen is the longest key ParseKey accepts, in bytes, after unquoting.
const MaxKeyLen = 255

// Errors returned by ParseKey and ParseKeyHeader; their messages echo no
// client input, so they are safe to show to a client.
var (
	ErrKeyMissing  = errors.New("missing Idempotency-Key header")
	ErrKeyMultiple = errors.New("more than one Idempotency-Key header")
	ErrKeyInvalid  = errors.New("malformed Idempotency-Key header")
)

// ParseKey is ParseKeyHeader for the Idempotency-Key header.
func ParseKey(h http.Header) (string, error) {
	return ParseKeyHeader(h, KeyHeader)
}

// ParseKeyHeader returns the idempotency key from the one line of the
// header name (canonical) in h, or ErrKeyMissing, ErrKeyMultiple or
// ErrKeyInvalid. The trimmed value is either bare (1..MaxKeyLen bytes of
// 0x21..0x7E) or an RFC 8941 string ("abc": 0x20..0x7E, \" and \\ the only
// escapes, nothing after the closing quote, unescaped to 1..MaxKeyLen
// bytes); both forms name the same key.
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

// ValidKey reports whether key is one the header could carry, unquoted:
// 1..MaxKeyLen bytes of 0x20..0x7E. Keys taken from elsewhere than the
// header (a request body) are held to it.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7E {
			return false
		}
	}
	return true
}

// parseQuotedKey returns the content of v, an RFC 8941 sf-string ending at
// the end of v, unescaped.
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
