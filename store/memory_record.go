package store

import (
	"net/http"
	"time"
)

// memRecord is one key's record in a Memory store, kept by value in the map
// so that claiming a new key allocates nothing of its own. Its body, header
// and decoded response are never written after they are built, so they may
// be read after the store's mutex is released.
type memRecord struct {
	state       State
	fingerprint string
	token       string
	fence       int64
	expires     time.Duration // on the store's monotonic clock
	status      int
	body        []byte    // the response body, as Complete was given it
	header      []byte    // header fields, each as in appendField
	resp        *Response // body and header decoded by the first replay, then shared
	decoded     int       // the estimated size of resp beyond body
}

// size is the number of response bytes r holds: its body's whole capacity,
// its encoded header, and the estimated size of its decoded response.
func (r *memRecord) size() int { return cap(r.body) + len(r.header) + r.decoded }

// heldBy reports whether owner holds r: r is in flight under owner's token
// and fencing number. An empty token holds nothing.
func (r *memRecord) heldBy(owner Lease) bool {
	return r.state == StateInFlight && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// owned returns r, in flight, as the Claim that holds it sees it at now:
// with the owner's token and fencing number.
func (r *memRecord) owned(now time.Duration) Record {
	return Record{
		State:       StateInFlight,
		Fingerprint: r.fingerprint,
		Owner:       Lease{Token: r.token, Fence: r.fence},
		TTL:         r.expires - now,
	}
}

// view returns r as a Claim that did not win sees it at now: without the
// owner's token, with the shared stored response (see decode).
func (r *memRecord) view(now time.Duration) Record {
	return Record{
		State:       r.state,
		Fingerprint: r.fingerprint,
		Owner:       Lease{Fence: r.fence},
		Response:    r.resp,
		TTL:         r.expires - now,
	}
}

// decode sets r.resp from r's encoded response, once, for every later
// replay to share: a hot key's replays then cost no copy at all. Its body
// is r.body itself, and the body and every header value slice are capped,
// so an append by a caller copies instead of writing into the store's
// memory. It sets r.decoded to an estimate of the memory the decoded
// response adds, and reports whether it changed r (a completed record not
// decoded before).
func (r *memRecord) decode() bool {
	if r.state != StateCompleted || r.resp != nil {
		return false
	}
	body := r.body[:len(r.body):len(r.body)]
	header := decodeHeader(r.header)
	r.resp = &Response{Status: r.status, Header: header, Body: body}
	r.decoded = decodedSize(header, len(r.header))
	return true
}

// decodedSize estimates, from above, the memory a decoded header adds to
// its response's body: the Response and the map's header, the map's slots
// (one group of eight for up to eight names; beyond that, groups for a
// power of two of slots at least eight sevenths of the names, and the
// table that holds them), a string header per value, and the one copy of
// the encoded header, of encLen bytes, that every name and value points
// into; plus an eighth, which the allocator's size classes may add.
func decodedSize(header http.Header, encLen int) int {
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
	exact := base + slots + values*valueSize + encLen
	return exact + exact/8 // allocation size classes round up by as much
}

// storedResponse returns a completed record holding resp's body, as it
// is, and its header encoded in one allocation, every field as in
// appendField.
func storedResponse(resp *Response) memRecord {
	size := 0
	for name, values := range resp.Header {
		for _, v := range values {
			size += fieldLen(name) + fieldLen(v)
		}
	}
	r := memRecord{state: StateCompleted, status: resp.Status, body: resp.Body}
	if size == 0 {
		return r
	}
	r.header = make([]byte, 0, size)
	for name, values := range resp.Header {
		for _, v := range values {
			r.header = appendField(appendField(r.header, name), v)
		}
	}
	return r
}

// fieldLen is how many bytes appendField adds for s.
func fieldLen(s string) int { return 4 + len(s) }

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
// and value is a substring of one copy of enc, and every value slice a part
// of one array, so it allocates the same few times however many fields
// there are. The header is never nil.
func decodeHeader(enc []byte) http.Header {
	s := string(enc)
	fields, names := 0, 0
	var prev string
	for rest := s; rest != ""; fields++ {
		var name string
		name, rest = cutField(rest)
		_, rest = cutField(rest)
		if fields == 0 || name != prev {
			names, prev = names+1, name
		}
	}
	h := make(http.Header, names)
	values := make([]string, fields)
	for i, rest := 0, s; rest != ""; {
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
