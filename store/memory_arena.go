package store

import "strings"

// chunkSize is the size of an arena's shared chunks; data longer than a
// quarter of it gets a chunk of its own, of its exact size.
const chunkSize = 64 << 10

// arena holds the data of a Memory store's completed records in shared
// chunks, so the store allocates once per chunk, not per response. A chunk
// is only appended to, never grown, so the strings over it never change
// and may be read without the store's mutex. A chunk no record lies in is
// dropped. When the chunks hold more than twice their records' bytes, four
// chunks and 64 bytes a slot (wasteful), the records of every chunk less
// than half full move to new ones: amortised, a constant cost per byte let go.
type arena struct {
	chunks  []chunk
	spare   []int32 // dropped chunks, to reuse
	current int32   // the chunk new data goes into, or -1
	held    int
	live    int
}

type chunk struct {
	text     *strings.Builder // nil once dropped
	live     int
	evacuate bool
}

func newArena() arena { return arena{current: -1} }

// add copies token, key, fingerprint, header and body, in that order, into
// a chunk, and returns the copy and the chunk's number. The data is never
// empty: a token never is.
func (a *arena) add(token, key, fingerprint string, header, body []byte) (string, int32) {
	n := len(token) + len(key) + len(fingerprint) + len(header) + len(body)
	c := a.room(n)
	text := a.chunks[c].text
	start := text.Len()
	text.WriteString(token)
	text.WriteString(key)
	text.WriteString(fingerprint)
	text.Write(header)
	text.Write(body)
	a.chunks[c].live += n
	a.live += n
	return text.String()[start:], c
}

// room returns the number of a chunk with room for n more bytes.
func (a *arena) room(n int) int32 {
	shared := n <= chunkSize/4
	if shared && a.current >= 0 {
		if text := a.chunks[a.current].text; text.Cap()-text.Len() >= n {
			return a.current
		}
	}
	size := n
	if shared {
		size = chunkSize
	}
	text := new(strings.Builder)
	text.Grow(size)
	a.held += text.Cap()
	var c int32
	if last := len(a.spare) - 1; last >= 0 {
		c, a.spare = a.spare[last], a.spare[:last]
		a.chunks[c] = chunk{text: text}
	} else {
		c = int32(len(a.chunks))
		a.chunks = append(a.chunks, chunk{text: text})
	}
	if shared {
		if a.current >= 0 && a.chunks[a.current].live == 0 {
			a.free(a.current)
		}
		a.current = c
	}
	return c
}

// drop notes that n bytes of chunk c are gone, and drops it once empty
// unless it is being filled.
func (a *arena) drop(c int32, n int) {
	a.chunks[c].live -= n
	a.live -= n
	if a.chunks[c].live == 0 && c != a.current {
		a.free(c)
	}
}

func (a *arena) free(c int32) {
	a.held -= a.chunks[c].text.Cap()
	a.chunks[c] = chunk{}
	a.spare = append(a.spare, c)
}

// wasteful reports whether it is time to compact (see arena).
func (a *arena) wasteful(slots int) bool {
	return a.held > 2*a.live+4*chunkSize+64*slots
}

// startCompaction marks for evacuation every chunk less than half full
// other than the current one, and reports whether it marked any.
func (a *arena) startCompaction() bool {
	marked := false
	for c := range a.chunks {
		k := &a.chunks[c]
		if k.text != nil && int32(c) != a.current && 2*k.live < k.text.Cap() {
			k.evacuate, marked = true, true
		}
	}
	return marked
}

func (a *arena) evacuating(c int32) bool { return a.chunks[c].evacuate }

// move copies data, a record's in chunk c, into another chunk and returns
// the copy and its chunk.
func (a *arena) move(data string, c int32) (string, int32) {
	copied, into := a.add(data, "", "", nil, nil)
	a.drop(c, len(data))
	return copied, into
}
