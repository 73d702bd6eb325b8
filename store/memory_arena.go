package store

import "strings"

// chunkSize is the size of the chunks an arena copies records' data into:
// a chunk holds some fifty 1 KiB responses, and data longer than a quarter
// of it gets a chunk of its own, of its exact size.
const chunkSize = 64 << 10

// arena holds the data of a Memory store's completed records. It copies
// each record's data into a chunk shared with the records completed around
// it, and the record keeps a string over its part of the chunk. A store
// then allocates once every few dozen responses, not once for each, and
// the garbage collector finds the records' data in a few large objects
// rather than in one small object each.
//
// The rules:
//   - A chunk is only ever appended to (it is a strings.Builder, never
//     grown past the room it was made with), so the strings over it never
//     change, and may be read without the store's mutex.
//   - The arena counts, for each chunk, the bytes of the records that lie
//     in it. A chunk no record lies in any more is dropped, and the
//     garbage collector frees it once no string a caller was given (a
//     fingerprint) lies in it either.
//   - Records of different lifetimes share chunks, so a few records kept
//     long could keep many chunks alive after their neighbours went. The
//     store therefore asks wasteful after it lets records go, and when the
//     chunks hold more than twice the bytes of the records in them, four
//     chunks and 64 bytes for each of its record slots, it compacts: it
//     moves the records of every chunk less than half full, other than the
//     one being filled, into new chunks. Compacting walks every slot and
//     copies what it moves; it leaves the chunks within twice their
//     records' bytes and one chunk, so before the next, records holding at
//     least 32 bytes for every slot (and a chunk and a half) must go,
//     which makes its cost, amortised, a constant for each byte let go. So
//     the chunks never hold more than twice their records' bytes, 64 bytes
//     a slot and five chunks (the four of the check, and the one being
//     filled, which may have been started since).
type arena struct {
	chunks  []chunk
	spare   []int32 // numbers of dropped chunks, to reuse
	current int32   // the chunk new data goes into, or -1
	held    int     // bytes of the chunks not dropped
	live    int     // bytes of records in them
}

// chunk is one of an arena's chunks.
type chunk struct {
	text     *strings.Builder // nil once dropped
	live     int              // bytes of records that lie in it
	evacuate bool             // being compacted: its records move out
}

// newArena returns an arena without chunks.
func newArena() arena { return arena{current: -1} }

// add copies the record data made of token, key, fingerprint, header and
// body, in that order, into a chunk, and returns it and the chunk's
// number. The data is never empty: a token never is.
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

// room returns the number of a chunk with room for n more bytes: for data
// longer than a quarter of chunkSize, a new chunk of its own; else the
// current chunk if it has the room, or a new one, which becomes current.
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

// drop notes that a record's data of n bytes in chunk c is gone, and drops
// the chunk if nothing else lies in it and it is not being filled.
func (a *arena) drop(c int32, n int) {
	a.chunks[c].live -= n
	a.live -= n
	if a.chunks[c].live == 0 && c != a.current {
		a.free(c)
	}
}

// free drops chunk c.
func (a *arena) free(c int32) {
	a.held -= a.chunks[c].text.Cap()
	a.chunks[c] = chunk{}
	a.spare = append(a.spare, c)
}

// wasteful reports whether the chunks hold more than twice the bytes of
// the records in them, four chunks, and 64 bytes for each of slots (the
// store's record slots): time to compact.
func (a *arena) wasteful(slots int) bool {
	return a.held > 2*a.live+4*chunkSize+64*slots
}

// startCompaction marks for evacuation every chunk less than half full
// other than the current one, and reports whether it marked any. The
// caller then moves the record data in them (see evacuating).
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

// evacuating reports whether chunk c's records are to move out.
func (a *arena) evacuating(c int32) bool { return a.chunks[c].evacuate }

// move copies data, a record's in chunk c, into another chunk, and drops
// it from c. It returns the copy and the chunk it lies in.
func (a *arena) move(data string, c int32) (string, int32) {
	copied, into := a.add(data, "", "", nil, nil)
	a.drop(c, len(data))
	return copied, into
}
