package store

import (
	"net/http"
	"strings"
	"time"
)

// memRecord is one key's record in a Memory store, kept by value in the
// index's slice. A completed record keeps its owner's token, key,
// fingerprint, encoded header and body in one string, data, in the arena;
// otherwise data is the fingerprint alone and the key is in callerKey.
// data and resp are never written after they are built, so they may be
// read without the mutex.
type memRecord struct {
	state       State  // 0 in a free slot of the index
	callerKey   string // the key, unless data holds it
	token       string // the owner's; none once released
	fence       int64
	expires     time.Duration
	completedAt time.Duration // when a done record completed
	status      int
	data        string
	fpAt        int       // data[len(token):fpAt] is the key, data[fpAt:headAt] the fingerprint
	headAt      int       // data[headAt:bodyAt] the header fields
	bodyAt      int       // data[bodyAt:] the body
	resp        *Response // decoded by the first duplicate, then shared
	decoded     int       // the estimated size of resp
	hash        uint32
	next        int32 // the next slot whose key has the same hash, or -1
	chunk       int32 // the arena chunk data lies in, if completed
}

func inFlight(key, fingerprint, token string, fence int64, expires time.Duration) memRecord {
	n := len(fingerprint)
	return memRecord{
		state: StateInFlight, callerKey: key, token: token, fence: fence, expires: expires,
		data: fingerprint, headAt: n, bodyAt: n,
	}
}

func (r *memRecord) key() string {
	if r.state != StateCompleted {
		return r.callerKey
	}
	return r.data[len(r.token):r.fpAt]
}

func (r *memRecord) fingerprint() string { return r.data[r.fpAt:r.headAt] }

// size is the number of bytes r counts against WithMaxBytes.
func (r *memRecord) size() int {
	if r.state != StateCompleted {
		return 0
	}
	return len(r.data) + r.decoded
}

// inArena reports whether r's data lies in chunk r.chunk of the arena.
func (r *memRecord) inArena() bool { return r.state == StateCompleted }

// heldBy reports whether r is in flight under owner's token and fencing
// number. An empty token holds nothing.
func (r *memRecord) heldBy(owner Lease) bool {
	return r.state == StateInFlight && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// doneBy reports whether owner completed r, with or without a response.
func (r *memRecord) doneBy(owner Lease) bool {
	return (r.state == StateCompleted || r.state == StateUnreplayable) && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// owned returns r as the Claim that holds it sees it at now.
func (r *memRecord) owned(now time.Duration) Record {
	return Record{
		State:       StateInFlight,
		Fingerprint: r.fingerprint(),
		Owner:       Lease{Token: r.token, Fence: r.fence},
		TTL:         r.expires - now,
	}
}

// view returns r as a duplicate's Claim sees it at now: without the
// owner's token. start is the instant the store's clock counts from.
func (r *memRecord) view(now time.Duration, start time.Time) Record {
	rec := Record{
		State:       r.state,
		Fingerprint: r.fingerprint(),
		Owner:       Lease{Fence: r.fence},
		Response:    r.resp,
		TTL:         r.expires - now,
	}
	if r.state == StateExpired {
		rec.Completed = start.Add(r.completedAt)
	}
	return rec
}

// tombstone returns done record r, whose retention ended, as the tombstone
// that stands for it until expires: the key and fingerprint, outside the
// arena, and when it completed.
func (r *memRecord) tombstone(expires time.Duration) memRecord {
	t := inFlight(strings.Clone(r.key()), strings.Clone(r.fingerprint()), "", r.fence, expires)
	t.state, t.completedAt = StateExpired, r.completedAt
	return t
}

// completed returns r completed with a response, its data (token, key,
// fingerprint, header and body) copied into a.
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

// decode sets r.resp, once, for every later duplicate to share, and
// reports whether it did. The header lies in its own copy, so a value that
// outlives the record (in an HPACK table) does not keep the record alive;
// the body is a capped copy, so a caller's append copies again.
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
// header holds, copied bytes included.
func decodedSize(header http.Header, copied int) int {
	const (
		base       = 192 // the Response and the map's header
		groupBytes = 328 // eight map slots and their control word
		tableBytes = 96  // the table of a map of more than one group
		valueSize  = 16
	)
	values := 0
	for _, v := range header {
		values += len(v)
	}
	slots := groupBytes + 8
	if n := len(header); n > 8 {
		capacity := 8
		for capacity*7 < n*8 {
			capacity *= 2
		}
		slots = capacity/8*groupBytes + tableBytes
	}
	exact := base + slots + values*valueSize + copied
	return exact + exact/8 // allocation size classes round up
}

// appendField appends s to buf, preceded by its length as four bytes,
// little-endian.
func appendField(buf []byte, s string) []byte {
	n := len(s)
	buf = append(buf, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	return append(buf, s...)
}

func cutField(enc string) (field, rest string) {
	n := int(enc[0]) | int(enc[1])<<8 | int(enc[2])<<16 | int(enc[3])<<24
	return enc[4 : 4+n], enc[4+n:]
}

// decodeHeader returns a new, non-nil header of the encoded fields, whose
// strings lie in enc and values in one array.
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
