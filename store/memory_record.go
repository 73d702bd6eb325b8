package store

import (
	"net/http"
	"strings"
	"time"
)

// memRecord is one key's record in a Memory store, kept by value in the
// index's slice so that claiming a new key allocates nothing of its own.
//
// A completed record keeps everything in one string, data: its owner's
// token, its key, its fingerprint, its header fields (each as in
// appendField) and its body, copied into the store's arena, in the chunk
// numbered chunk; token is the start of data. The
// record then holds no string of the caller's, and its
// memory lies in a chunk without pointers inside, which the garbage
// collector marks without scanning. In flight, and when done without a
// response, data is the fingerprint alone and the key is held apart, in
// callerKey; neither is in the arena.
//
// data, and the decoded response, are never written after they are built,
// so they may be read after the store's mutex is released.
type memRecord struct {
	state     State  // 0 in a free slot of the index
	callerKey string // the key, unless data holds it
	token     string // the owner's; none once released
	fence     int64
	expires   time.Duration // on the store's monotonic clock
	status    int
	data      string
	fpAt      int       // data[len(token):fpAt] is the key, data[fpAt:headAt] the fingerprint
	headAt    int       // data[headAt:bodyAt] the header fields
	bodyAt    int       // data[bodyAt:] the body
	resp      *Response // decoded by the first duplicate, then shared
	decoded   int       // the estimated size of resp
	hash      uint32    // the key's hash, for the index
	next      int32     // the slot of the next record whose key has the same hash, or -1
	chunk     int32     // the arena chunk data lies in, if completed
}

// inFlight returns a record of key in flight under token, for a request
// whose fingerprint is given.
func inFlight(key, fingerprint, token string, fence int64, expires time.Duration) memRecord {
	n := len(fingerprint)
	return memRecord{
		state: StateInFlight, callerKey: key, token: token, fence: fence, expires: expires,
		data: fingerprint, headAt: n, bodyAt: n,
	}
}

// key returns r's key: the copy in data of a completed record, or the
// caller's string.
func (r *memRecord) key() string {
	if r.state != StateCompleted {
		return r.callerKey
	}
	return r.data[len(r.token):r.fpAt]
}

// fingerprint returns the fingerprint of the request that claimed r.
func (r *memRecord) fingerprint() string { return r.data[r.fpAt:r.headAt] }

// size is the number of bytes r counts against WithMaxBytes: for a
// completed record its data (key, fingerprint, encoded header and body)
// and the estimated size of its decoded response. A record in flight or
// done without a response counts none.
func (r *memRecord) size() int {
	if r.state != StateCompleted {
		return 0
	}
	return len(r.data) + r.decoded
}

// inArena reports whether r's data lies in the store's arena, in chunk
// r.chunk: r is completed.
func (r *memRecord) inArena() bool { return r.state == StateCompleted }

// heldBy reports whether owner holds r: r is in flight under owner's token
// and fencing number. An empty token holds nothing.
func (r *memRecord) heldBy(owner Lease) bool {
	return r.state == StateInFlight && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// doneBy reports whether owner completed r: r is done, with or without a
// response, under owner's token and fencing number.
func (r *memRecord) doneBy(owner Lease) bool {
	return (r.state == StateCompleted || r.state == StateUnreplayable) && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// owned returns r, in flight, as the Claim that holds it sees it at now:
// with the owner's token and fencing number.
func (r *memRecord) owned(now time.Duration) Record {
	return Record{
		State:       StateInFlight,
		Fingerprint: r.fingerprint(),
		Owner:       Lease{Token: r.token, Fence: r.fence},
		TTL:         r.expires - now,
	}
}

// view returns r as a Claim that did not win sees it at now: without the
// owner's token, with the stored response that duplicates share (see
// decode).
func (r *memRecord) view(now time.Duration) Record {
	return Record{
		State:       r.state,
		Fingerprint: r.fingerprint(),
		Owner:       Lease{Fence: r.fence},
		Response:    r.resp,
		TTL:         r.expires - now,
	}
}

// completed returns r completed with a response of status, header fields
// encoded by encodeHeader, and body: r's token, key and fingerprint, the
// header and the body copied into one string in a.
func (r *memRecord) completed(a *arena, status int, header, body []byte) memRecord {
	key, fingerprint := r.key(), r.fingerprint()
	data, chunk := a.add(r.token, key, fingerprint, header, body)
	fpAt := len(r.token) + len(key)
	headAt := fpAt + len(fingerprint)
	return memRecord{
		state: StateCompleted, token: data[:len(r.token)], fence: r.fence, status: status, chunk: chunk,
		data: data, fpAt: fpAt, headAt: headAt, bodyAt: headAt + len(header),
	}
}

// move puts r's data in chunk c of the arena, as data, which holds the
// same bytes.
func (r *memRecord) move(data string, c int32) {
	r.data, r.token, r.chunk = data, data[:len(r.token)], c
}

// encodeHeader appends header's fields to buf, each name and value as
// appendField writes it. Names without values are left out.
func encodeHeader(buf []byte, header http.Header) []byte {
	for name, values := range header {
		for _, v := range values {
			buf = appendField(appendField(buf, name), v)
		}
	}
	return buf
}

// decode sets r.resp from r's data, once, for every later duplicate to
// share: a hot key's replays then cost no copy at all. The header's names
// and values are substrings of one copy of the encoded header, not of data:
// a value that outlives the record (a connection's HPACK table keeps the
// values it sends) then keeps a few bytes alive, not the whole record. The
// body is a copy too, capped, so an append by a caller copies again instead
// of writing into the store's memory. It sets r.decoded to an estimate of
// the memory the decoded response adds, and reports whether it changed r
// (a completed record not decoded before).
func (r *memRecord) decode() bool {
	if r.state != StateCompleted || r.resp != nil {
		return false
	}
	body := []byte(r.data[r.bodyAt:])
	encoded := strings.Clone(r.data[r.headAt:r.bodyAt])
	header := decodeHeader(encoded)
	r.resp = &Response{Status: r.status, Header: header, Body: body[:len(body):len(body)]}
	r.decoded = decodedSize(header, len(encoded)+len(body))
	return true
}

// decodedSize estimates, from above, the memory a decoded response with
// header holds: the Response and the map's header, the map's slots (one
// group of eight for up to eight names; beyond that, groups for a power of
// two of slots at least eight sevenths of the names, and the table that
// holds them), a string header per value, and the copied bytes (the body
// and the encoded header); plus an eighth, which the allocator's size
// classes may add.
func decodedSize(header http.Header, copied int) int {
	const (
		base       = 192 // the Response and the map's header, rounded up to allocation sizes
		groupBytes = 328 // eight slots of a string and a slice, and their control word
		tableBytes = 96  // the table and directory of a map of more than one group
		valueSize  = 16  // a string header in the values array
	)
	values := 0
	for _, v := range header {
		values += len(v)
	}
	slots := groupBytes + 8 // one group, rounded up to its allocation size
	if n := len(header); n > 8 {
		capacity := 8
		for capacity*7 < n*8 {
			capacity *= 2
		}
		slots = capacity/8*groupBytes + tableBytes
	}
	exact := base + slots + values*valueSize + copied
	return exact + exact/8 // allocation size classes round up by as much
}

// appendField appends s to buf, preceded by its length as four bytes,
// little-endian. A header field is its name then its value; the fields of
// one name are adjacent, in the order of its values.
func appendField(buf []byte, s string) []byte {
	n := len(s)
	buf = append(buf, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	return append(buf, s...)
}

// cutField returns the first field of enc and the rest.
func cutField(enc string) (field, rest string) {
	n := int(enc[0]) | int(enc[1])<<8 | int(enc[2])<<16 | int(enc[3])<<24
	return enc[4 : 4+n], enc[4+n:]
}

// decodeHeader returns a new header holding the encoded fields. Every name
// and value is a substring of enc, and every value slice a part of one
// array, so it allocates the same few times however many fields there are.
// The header is never nil.
func decodeHeader(enc string) http.Header {
	fields, names := 0, 0
	var prev string
	for rest := enc; rest != ""; fields++ {
		var name string
		name, rest = cutField(rest)
		_, rest = cutField(rest)
		if fields == 0 || name != prev {
			names, prev = names+1, name
		}
	}
	h := make(http.Header, names)
	values := make([]string, fields)
	for i, rest := 0, enc; rest != ""; {
		name, _ := cutField(rest)
		start := i
		for rest != "" {
			next, after := cutField(rest)
			if next != name {
				break
			}
			values[i], rest = cutField(after)
			i++
		}
		h[name] = values[start:i:i]
	}
	return h
}
