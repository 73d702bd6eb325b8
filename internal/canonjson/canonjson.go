// Package canonjson re-encodes a JSON text in one canonical form, so that
// two encodings of one value (members in another order, other white space)
// hash alike, and never gives two texts that a decoder could read
// differently one form. Canonical is its one entry point.
package canonjson

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"unicode"
	"unicode/utf8"
)

// MaxSize is the longest body Canonical can number the positions of; the
// caller must not give it a longer one.
const MaxSize = math.MaxInt32

// Canonical returns body re-encoded with object members sorted by name and
// insignificant whitespace removed, when body is exactly one JSON value
// (surrounding whitespace aside) that decoding reads only one way;
// otherwise body itself: a member named twice, two names equal under case
// folding (strings.EqualFold, as encoding/json matches fields), invalid
// UTF-8, a lone surrogate escape or U+FFFD, or nesting deeper than
// encoding/json accepts. The form is, byte for byte, what encoding/json
// gives when it decodes body (numbers as json.Number) and encodes it
// again. body must be at most MaxSize bytes.
func Canonical(body []byte) []byte {
	// The stored fingerprints depend on that form, so it must never
	// change. The body is read in two passes; besides the output, this
	// allocates 16 bytes for each object of two members or more and 12 for
	// each of its members, twice over while the object is read, the
	// decoded names, and for an object whose names hold a capital or a
	// non-ASCII character up to 8 bytes a member and its names folded,
	// reused from one object to the next.
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

// maxJSONDepth is the deepest nesting of objects and arrays that
// encoding/json decodes, and so Canonical too.
const maxJSONDepth = 10000

// canonicalizer re-encodes one JSON body. parse checks the body and notes
// every object of two members or more, with its members sorted; emit then
// writes the canonical form, reading the body again and taking the members
// of each object parse noted in the order it sorted them (an object of one
// member or none is in order as it stands).
type canonicalizer struct {
	in       []byte
	objects  []jsonObject // in the order they close, until Canonical sorts them by start
	members  []jsonMember // each object's members, sorted, object after object
	open     []jsonMember // the members of the objects parse is inside
	names    []byte       // every member name, decoded
	scratch  []byte       // a decoded string, while it is checked or written; or an object's names, folded
	foldedAt []nameSpan   // where each folded name is in scratch
	out      []byte
}

// nameSpan is where one of the folded names is: scratch[start:end].
type nameSpan struct{ start, end int32 }

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
// valid JSON or decoding would not keep it whole (see Canonical).
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
// naming a member twice, or two members alike but for case, is refused.
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

// namesFoldAlike reports whether two of members' names, which differ,
// are equal under simple Unicode case folding, as strings.EqualFold and
// encoding/json, matching a name to a struct field, compare them. Two
// names of ASCII characters other than capitals are only alike if equal,
// so it folds the names only if one of them holds a capital or a
// non-ASCII character.
func (c *canonicalizer) namesFoldAlike(members []jsonMember) bool {
	if !slices.ContainsFunc(members, func(m jsonMember) bool { return mayFoldToAnother(c.name(m)) }) {
		return false
	}
	size := 0 // folding never lengthens a name: the least of like characters is no longer in UTF-8
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

// mayFoldToAnother reports whether name holds a capital or a byte of a
// non-ASCII character. A name that holds neither is equal under case
// folding to no other name that holds neither.
func mayFoldToAnother(name []byte) bool {
	for _, b := range name {
		if b >= utf8.RuneSelf || 'A' <= b && b <= 'Z' {
			return true
		}
	}
	return false
}

// appendFolded appends name, valid UTF-8, to dst with every character
// replaced by the least of those it equals under simple case folding, so
// that two names fold to the same bytes exactly when strings.EqualFold
// holds for them.
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
