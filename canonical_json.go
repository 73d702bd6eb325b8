package idempotency

import (
	"bytes"
	"cmp"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// canonicalJSON returns body re-encoded with object members sorted by name
// and insignificant whitespace removed, when the request says it is JSON
// and the body is exactly one JSON value (surrounding whitespace aside)
// that decoding keeps whole; otherwise it returns body unchanged. Decoding
// does not keep a body whole when an object names a member twice (after
// escapes are decoded) or a string holds invalid UTF-8, a lone surrogate
// escape or U+FFFD, which would all decode alike.
//
// The canonical form is, byte for byte, what encoding/json gives when it
// decodes the body (numbers as json.Number) and encodes it again: numbers
// keep their literal form, member names sort by their decoded bytes, and
// strings are escaped as json.Marshal escapes them, HTML characters
// included. Earlier versions computed it that way, and the stored
// fingerprints depend on it. So does the depth limit: a body nested deeper
// than encoding/json accepts is left as it is.
//
// It reads the body in two passes. Besides the output, it allocates 16
// bytes for each object of two members or more and 12 for each member of
// such an object, twice over while the object is read, and the decoded
// names; positions are 32-bit, so the body must be under 2 GiB, which New
// makes sure of (see maxCanonicalBody).
func canonicalJSON(r *http.Request, body []byte) []byte {
	if !isJSON(r.Header.Get("Content-Type")) {
		return body
	}
	c := canonicalizer{in: body}
	start := skipSpace(body, 0)
	end, ok := c.parse(start, 0)
	if !ok || skipSpace(body, end) != len(body) {
		return body
	}
	slices.SortFunc(c.objects, func(a, b jsonObject) int { return cmp.Compare(a.start, b.start) })
	c.out = make([]byte, 0, len(body))
	c.emit(start)
	return c.out
}

func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// maxCanonicalBody is the largest body canonicalJSON can number the
// positions of; New refuses a larger WithMaxBodyBytes beside
// WithCanonicalJSON.
const maxCanonicalBody = math.MaxInt32

// maxJSONDepth is the deepest nesting of objects and arrays that
// encoding/json decodes, and so canonicalJSON too.
const maxJSONDepth = 10000

// canonicalizer re-encodes one JSON body. parse checks the body and notes
// every object of two members or more, with its members sorted; emit then
// writes the canonical form, reading the body again and taking the members
// of each object parse noted in the order it sorted them (an object of one
// member or none is in order as it stands).
type canonicalizer struct {
	in      []byte
	objects []jsonObject // in the order they close, until canonicalJSON sorts them by start
	members []jsonMember // each object's members, sorted, object after object
	open    []jsonMember // the members of the objects parse is inside
	names   []byte       // every member name, decoded
	scratch []byte       // a decoded string, while it is checked or written
	out     []byte
}

// jsonObject is an object of the body: in[start:end], with the members
// members[first:first+count].
type jsonObject struct {
	start, end   int32
	first, count int32
}

// jsonMember is one member of an object: its decoded name, names[nameAt:nameEnd],
// and where its value starts in the body.
type jsonMember struct {
	nameAt, nameEnd int32
	value           int32
}

// parse checks the value that starts at in[p], at depth open objects and
// arrays, and returns where it ends. It reports false if the value is not
// valid JSON or decoding would not keep it whole (see canonicalJSON).
func (c *canonicalizer) parse(p, depth int) (int, bool) {
	if p >= len(c.in) {
		return p, false
	}
	switch b := c.in[p]; {
	case b == '{':
		return c.parseObject(p, depth+1)
	case b == '[':
		return c.parseArray(p, depth+1)
	case b == '"':
		var ok bool
		c.scratch, p, ok = decodeString(c.scratch[:0], c.in, p)
		return p, ok
	case b == 't':
		return parseWord(c.in, p, "true")
	case b == 'f':
		return parseWord(c.in, p, "false")
	case b == 'n':
		return parseWord(c.in, p, "null")
	default: // a number, or a byte no value starts with, which parseNumber refuses
		return parseNumber(c.in, p)
	}
}

// parseObject parses the object at in[p], which opens depth levels of
// nesting, and returns where it ends. It sorts the object's members by
// name and, if there are two or more, notes the object and them. An object
// naming a member twice is refused.
func (c *canonicalizer) parseObject(p, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return p, false
	}
	start, base := p, len(c.open)
	p = skipSpace(c.in, p+1)
	if p < len(c.in) && c.in[p] == '}' {
		p++
	} else {
		for {
			if p >= len(c.in) || c.in[p] != '"' {
				return p, false
			}
			nameAt := len(c.names)
			var ok bool
			c.names, p, ok = decodeString(withRoom(c.names, 64), c.in, p) // most names fit in 64 bytes
			if !ok {
				return p, false
			}
			p = skipSpace(c.in, p)
			if p >= len(c.in) || c.in[p] != ':' {
				return p, false
			}
			value := skipSpace(c.in, p+1)
			c.open = append(withRoom(c.open, 1), jsonMember{nameAt: int32(nameAt), nameEnd: int32(len(c.names)), value: int32(value)})
			if p, ok = c.parse(value, depth); !ok {
				return p, false
			}
			p = skipSpace(c.in, p)
			if p < len(c.in) && c.in[p] == ',' {
				p = skipSpace(c.in, p+1)
				continue
			}
			if p < len(c.in) && c.in[p] == '}' {
				p++
				break
			}
			return p, false
		}
	}
	members := c.open[base:]
	slices.SortFunc(members, func(a, b jsonMember) int { return bytes.Compare(c.name(a), c.name(b)) })
	for i := 1; i < len(members); i++ {
		if bytes.Equal(c.name(members[i-1]), c.name(members[i])) {
			return p, false
		}
	}
	if len(members) >= 2 {
		c.objects = append(withRoom(c.objects, 1), jsonObject{
			start: int32(start), end: int32(p), first: int32(len(c.members)), count: int32(len(members)),
		})
		c.members = append(withRoom(c.members, len(members)), members...)
	}
	c.open = c.open[:base]
	return p, true
}

// parseArray parses the array at in[p], which opens depth levels of
// nesting, and returns where it ends.
func (c *canonicalizer) parseArray(p, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return p, false
	}
	p = skipSpace(c.in, p+1)
	if p < len(c.in) && c.in[p] == ']' {
		return p + 1, true
	}
	for {
		var ok bool
		if p, ok = c.parse(p, depth); !ok {
			return p, false
		}
		p = skipSpace(c.in, p)
		if p < len(c.in) && c.in[p] == ',' {
			p = skipSpace(c.in, p+1)
			continue
		}
		if p < len(c.in) && c.in[p] == ']' {
			return p + 1, true
		}
		return p, false
	}
}

// name returns m's decoded name.
func (c *canonicalizer) name(m jsonMember) []byte { return c.names[m.nameAt:m.nameEnd] }

// emit appends the canonical form of the value at in[p] to out, and
// returns where the value ends in the body. The value must be one parse
// accepted: emit reads it without checking it again.
func (c *canonicalizer) emit(p int) int {
	switch c.in[p] {
	case '{':
		i, noted := slices.BinarySearchFunc(c.objects, p, func(o jsonObject, p int) int { return cmp.Compare(int(o.start), p) })
		if !noted {
			return c.emitInOrder(p)
		}
		o := c.objects[i]
		c.out = append(c.out, '{')
		for n, m := range c.members[o.first : o.first+o.count] {
			if n > 0 {
				c.out = append(c.out, ',')
			}
			c.out = appendJSONString(c.out, c.name(m))
			c.out = append(c.out, ':')
			c.emit(int(m.value))
		}
		c.out = append(c.out, '}')
		return int(o.end)
	case '[':
		c.out = append(c.out, '[')
		p = skipSpace(c.in, p+1)
		for c.in[p] != ']' { // parse saw a comma or the end after each element
			if c.in[p] == ',' {
				c.out = append(c.out, ',')
				p = skipSpace(c.in, p+1)
			}
			p = skipSpace(c.in, c.emit(p))
		}
		c.out = append(c.out, ']')
		return p + 1
	case '"':
		c.scratch, p, _ = decodeString(c.scratch[:0], c.in, p)
		c.out = appendJSONString(c.out, c.scratch)
		return p
	default: // a number or a literal, written as it is
		end := p
		for end < len(c.in) && !isJSONDelimiter(c.in[end]) {
			end++
		}
		c.out = append(c.out, c.in[p:end]...)
		return end
	}
}

// emitInOrder appends the object at in[p], of one member or none, to out
// as emit does, and returns where it ends.
func (c *canonicalizer) emitInOrder(p int) int {
	c.out = append(c.out, '{')
	p = skipSpace(c.in, p+1)
	if c.in[p] == '"' {
		c.scratch, p, _ = decodeString(c.scratch[:0], c.in, p)
		c.out = appendJSONString(c.out, c.scratch)
		c.out = append(c.out, ':')
		p = skipSpace(c.in, skipSpace(c.in, p)+1) // past the colon
		p = skipSpace(c.in, c.emit(p))
	}
	c.out = append(c.out, '}')
	return p + 1
}

// withRoom returns s with room for at least n more elements: when it has
// less, it grows to at least twice its length. append alone grows a large
// slice by about a quarter at a time, leaving behind arrays that add up to
// some four times the last one; doubling leaves less than the last one.
// That matters for a large body of small values.
func withRoom[S ~[]E, E any](s S, n int) S {
	if cap(s)-len(s) >= n {
		return s
	}
	return slices.Grow(s, max(n, len(s)))
}

// isJSONDelimiter reports whether b ends a number or a literal in valid
// JSON: whitespace, or what may follow a value.
func isJSONDelimiter(b byte) bool {
	return isJSONSpace(b) || b == ',' || b == ']' || b == '}'
}

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// skipSpace returns the position of the first byte at or after p in in
// that is not JSON whitespace.
func skipSpace(in []byte, p int) int {
	for p < len(in) && isJSONSpace(in[p]) {
		p++
	}
	return p
}

// parseWord checks that in[p:] starts with word (true, false or null) and
// returns where it ends.
func parseWord(in []byte, p int, word string) (int, bool) {
	if len(in)-p < len(word) || string(in[p:p+len(word)]) != word {
		return p, false
	}
	return p + len(word), true
}

// parseNumber checks the number at in[p] against JSON's grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns where it
// ends.
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

// decodeString decodes the JSON string that starts at in[p], its opening
// quote, appends its text to dst, and returns dst and where the string
// ends. It reports false if the string is not valid JSON, or if its text
// would hold U+FFFD: invalid UTF-8, a surrogate escape that is not half of
// a pair, or U+FFFD itself, written or escaped.
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

// decodeEscape decodes the escape sequence at in[p], its backslash,
// appends what it stands for to dst, and returns dst and where it ends.
// It reports false as decodeString does.
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

// unescape returns the byte that a backslash followed by c, other than
// u, stands for, and false if that is no JSON escape.
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

// hex4 reads the four hex digits at in[p:] as a code unit, and reports
// false if there are not four.
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

// needsEscape holds the printable ASCII characters that json.Marshal
// escapes.
var needsEscape = [utf8.RuneSelf]bool{'"': true, '\\': true, '<': true, '>': true, '&': true}

// inStringAsIs holds the bytes that a JSON string holds as they are: the
// printable ASCII characters other than " and \.
var inStringAsIs = func() (asIs [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		asIs[b] = b != '"' && b != '\\'
	}
	return asIs
}()

// appendJSONString appends s, valid UTF-8, to dst as json.Marshal writes a
// string: quoted; with ", \ and the control characters escaped (\b, \f,
// \n, \r and \t short, the rest as \u00XX); <, > and & as \u003c, \u003e
// and \u0026; and U+2028 and U+2029 escaped.
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
