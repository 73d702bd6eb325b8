package canonjson

// JSON tokens as encoding/json reads and writes them.

import (
	"unicode/utf16"
	"unicode/utf8"
)

// isJSONDelimiter reports whether b ends a number or a literal.
func isJSONDelimiter(b byte) bool {
	return isJSONSpace(b) || b == ',' || b == ']' || b == '}'
}

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// skipSpace returns the first non-whitespace position at or after p.
func skipSpace(in []byte, p int) int {
	for p < len(in) && isJSONSpace(in[p]) {
		p++
	}
	return p
}

func parseWord(in []byte, p int, word string) (int, bool) {
	if len(in)-p < len(word) || string(in[p:p+len(word)]) != word {
		return p, false
	}
	return p + len(word), true
}

// parseNumber checks the number at in[p] against JSON's grammar and
// returns where it ends.
func parseNumber(in []byte, p int) (int, bool) {
	if p < len(in) && in[p] == '-' {
		p++
	}
	switch {
	case p < len(in) && in[p] == '0':
		p++
	case p < len(in) && in[p] >= '1' && in[p] <= '9':
		p = skipDigits(in, p)
	default:
		return p, false
	}
	if p < len(in) && in[p] == '.' {
		if p++; p >= len(in) || !isDigit(in[p]) {
			return p, false
		}
		p = skipDigits(in, p)
	}
	if p < len(in) && (in[p] == 'e' || in[p] == 'E') {
		if p++; p < len(in) && (in[p] == '+' || in[p] == '-') {
			p++
		}
		if p >= len(in) || !isDigit(in[p]) {
			return p, false
		}
		p = skipDigits(in, p)
	}
	return p, true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func skipDigits(in []byte, p int) int {
	for p < len(in) && isDigit(in[p]) {
		p++
	}
	return p
}

// decodeString appends the text of the JSON string at in[p] to dst and
// returns where it ends. It reports false for invalid JSON or text that
// would hold U+FFFD (invalid UTF-8, a lone surrogate, or U+FFFD itself),
// which decoding would not keep apart.
func decodeString(dst, in []byte, p int) ([]byte, int, bool) {
	p++ // the opening quote
	for p < len(in) {
		plain := p
		for plain < len(in) && inStringAsIs[in[plain]] {
			plain++
		}
		dst, p = append(dst, in[p:plain]...), plain
		if p == len(in) {
			break
		}
		switch b := in[p]; {
		case b == '"':
			return dst, p + 1, true
		case b == '\\':
			var ok bool
			if dst, p, ok = decodeEscape(dst, in, p); !ok {
				return dst, p, false
			}
		case b < 0x20:
			return dst, p, false
		default:
			r, size := utf8.DecodeRune(in[p:])
			if r == utf8.RuneError {
				return dst, p, false
			}
			dst = append(dst, in[p:p+size]...)
			p += size
		}
	}
	return dst, p, false
}

// decodeEscape is decodeString for the escape sequence at in[p].
func decodeEscape(dst, in []byte, p int) ([]byte, int, bool) {
	if p+1 >= len(in) {
		return dst, p, false
	}
	if c := in[p+1]; c != 'u' {
		b, ok := unescape(c)
		return append(dst, b), p + 2, ok
	}
	r, ok := hex4(in, p+2)
	if !ok {
		return dst, p, false
	}
	p += 6
	if utf16.IsSurrogate(r) {
		// Only a high half escaped right before a low half is a character.
		var low rune
		if ok = p+1 < len(in) && in[p] == '\\' && in[p+1] == 'u'; ok {
			low, ok = hex4(in, p+2)
		}
		if !ok {
			return dst, p, false
		}
		r, p = utf16.DecodeRune(r, low), p+6 // U+FFFD if not a high and a low half
	}
	if r == utf8.RuneError {
		return dst, p, false
	}
	return utf8.AppendRune(dst, r), p, true
}

// unescape returns the byte that the escape \c (not \u) stands for.
func unescape(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// hex4 reads four hex digits at in[p:] as a code unit.
func hex4(in []byte, p int) (rune, bool) {
	if p+4 > len(in) {
		return 0, false
	}
	var r rune
	for _, c := range in[p : p+4] {
		switch {
		case isDigit(c):
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// needsEscape holds the printable ASCII characters json.Marshal escapes.
var needsEscape = [utf8.RuneSelf]bool{'"': true, '\\': true, '<': true, '>': true, '&': true}

// inStringAsIs holds the printable ASCII bytes other than " and \.
var inStringAsIs = func() (asIs [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		asIs[b] = b != '"' && b != '\\'
	}
	return asIs
}()

// appendJSONString appends s, valid UTF-8, quoted and escaped exactly as
// json.Marshal writes it (HTML characters and U+2028/9 included).
func appendJSONString(dst, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		plain := i
		for plain < len(s) && inStringAsIs[s[plain]] && !needsEscape[s[plain]] {
			plain++
		}
		dst, i = append(dst, s[i:plain]...), plain
		if i == len(s) {
			break
		}
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r == '\u2028' || r == '\u2029' {
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
		case b == '\b':
			dst = append(dst, '\\', 'b')
		case b == '\f':
			dst = append(dst, '\\', 'f')
		case b == '\n':
			dst = append(dst, '\\', 'n')
		case b == '\r':
			dst = append(dst, '\\', 'r')
		case b == '\t':
			dst = append(dst, '\\', 't')
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
		default:
			dst = append(dst, b)
		}
		i++
	}
	return append(dst, '"')
}
