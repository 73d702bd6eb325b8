package idempotency

import (
	"bytes"
	"cmp"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
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

// isJSON reports whether contentType names JSON: application/json, or a
// media type ending in +json (application/problem+json, say).
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
	empty := p < len(c.in) && c.in[p] == '}'
	if empty {
		p++
	}
	for more := !empty; more; {
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
		if p, more, ok = c.afterItem(p, '}'); !ok {
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
	for more := true; more; {
		var ok bool
		if p, ok = c.parse(p, depth); !ok {
			return p, false
		}
		if p, more, ok = c.afterItem(p, ']'); !ok {
			return p, false
		}
	}
	return p, true
}

// afterItem reads what follows a member or an element that ends at in[p]:
// a comma, after which it returns where the next one starts and more; or
// close, the end of the object or array, after which it returns where that
// ends. It reports false if anything else follows.
func (c *canonicalizer) afterItem(p int, close byte) (next int, more, ok bool) {
	p = skipSpace(c.in, p)
	switch {
	case p < len(c.in) && c.in[p] == ',':
		return skipSpace(c.in, p+1), true, true
	case p < len(c.in) && c.in[p] == close:
		return p + 1, false, true
	default:
		return p, false, false
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
