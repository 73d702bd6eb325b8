// Package canonjson re-encodes a JSON text in one canonical form, so that
// two encodings of one value hash alike, while two texts a decoder could
// read differently never share a form.
package canonjson

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"unicode"
	"unicode/utf8"
)

// MaxSize is the longest body Canonical accepts.
const MaxSize = math.MaxInt32

// Canonical returns body with object members sorted by name and
// insignificant whitespace removed, byte for byte what encoding/json gives
// when it decodes body (numbers as json.Number) and encodes it again. It
// returns body itself unless body is one JSON value that decodes only one
// way: not with a member named twice, two names equal under
// strings.EqualFold, invalid UTF-8, a lone surrogate escape, U+FFFD, or
// nesting deeper than encoding/json accepts. body must be at most MaxSize
// bytes.
func Canonical(body []byte) []byte {
	// Stored fingerprints depend on this form: it must never change.
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

// maxJSONDepth is the deepest nesting encoding/json decodes.
const maxJSONDepth = 10000

// canonicalizer re-encodes one JSON body in two passes: parse checks it and
// notes every object of two members or more with its members sorted; emit
// writes the canonical form from the body and those notes.
type canonicalizer struct {
	in       []byte
	objects  []jsonObject // in the order they close, until Canonical sorts them by start
	members  []jsonMember // each object's members, sorted, object after object
	open     []jsonMember // the members of the objects parse is inside
	names    []byte       // every member name, decoded
	scratch  []byte       // a decoded string, or an object's names folded
	foldedAt []nameSpan   // the folded names in scratch
	out      []byte
}

type nameSpan struct{ start, end int32 }

// jsonObject is in[start:end], with members[first:first+count].
type jsonObject struct {
	start, end   int32
	first, count int32
}

// jsonMember is a member's decoded name, names[nameAt:nameEnd], and where
// its value starts in the body.
type jsonMember struct {
	nameAt, nameEnd int32
	value           int32
}

// parse checks the value at in[p], inside depth levels of nesting, and
// returns where it ends; false if Canonical must refuse it.
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

// parseObject parses the object at in[p] and notes it if it has two
// members or more, sorted by name. A name repeated, or alike but for case,
// is refused.
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
	if len(members) >= 2 && c.namesFoldAlike(members) {
		return p, false
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

// afterItem reads the comma (more) or close that must follow an item
// ending at in[p], and returns where the next item or the container ends.
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

func (c *canonicalizer) name(m jsonMember) []byte { return c.names[m.nameAt:m.nameEnd] }

// namesFoldAlike reports whether two of members' distinct names are equal
// under strings.EqualFold, as encoding/json matches struct fields. Names
// without capitals or non-ASCII fold to nothing else and are not folded.
func (c *canonicalizer) namesFoldAlike(members []jsonMember) bool {
	if !slices.ContainsFunc(members, func(m jsonMember) bool { return mayFoldToAnother(c.name(m)) }) {
		return false
	}
	size := 0 // folding never lengthens a name in UTF-8
	for _, m := range members {
		size += len(c.name(m))
	}
	c.scratch, c.foldedAt = slices.Grow(c.scratch[:0], size), slices.Grow(c.foldedAt[:0], len(members))
	for _, m := range members {
		start := len(c.scratch)
		c.scratch = appendFolded(c.scratch, c.name(m))
		c.foldedAt = append(c.foldedAt, nameSpan{start: int32(start), end: int32(len(c.scratch))})
	}
	slices.SortFunc(c.foldedAt, func(a, b nameSpan) int { return bytes.Compare(c.foldedName(a), c.foldedName(b)) })
	for i := 1; i < len(c.foldedAt); i++ {
		if bytes.Equal(c.foldedName(c.foldedAt[i-1]), c.foldedName(c.foldedAt[i])) {
			return true
		}
	}
	return false
}

func (c *canonicalizer) foldedName(s nameSpan) []byte { return c.scratch[s.start:s.end] }

// mayFoldToAnother reports whether name holds a capital or a non-ASCII
// byte.
func mayFoldToAnother(name []byte) bool {
	for _, b := range name {
		if b >= utf8.RuneSelf || 'A' <= b && b <= 'Z' {
			return true
		}
	}
	return false
}

// appendFolded appends name, valid UTF-8, with each character replaced by
// the least in its simple case folding orbit, so two names fold alike
// exactly when strings.EqualFold holds.
func appendFolded(dst, name []byte) []byte {
	for _, r := range string(name) {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			dst = append(dst, byte(r))
			continue
		}
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
	}
	return dst
}

// emit appends the canonical form of the value at in[p], which parse
// accepted, and returns where it ends.
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

// emitInOrder is emit for an object of one member or none.
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

// withRoom returns s with room for n more, doubling when it grows: append
// grows large slices by a quarter, leaving more garbage behind.
func withRoom[S ~[]E, E any](s S, n int) S {
	if cap(s)-len(s) >= n {
		return s
	}
	return slices.Grow(s, max(n, len(s)))
}
