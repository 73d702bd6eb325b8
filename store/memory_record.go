package store

import (
	"net/http"
	"time"
)

// memRecord is one key's record in a Memory store, kept by value in the map
// so that claiming a new key allocates nothing of its own. Its header and
// body are never written after the record is built, so they may be read
// after the store's mutex is released.
type memRecord struct {
	state       State
	fingerprint string
	token       string
	fence       int64
	expires     time.Duration // on the store's monotonic clock
	status      int
	header      []string // name, value pairs; a name's values are adjacent
	body        []byte
}

// heldBy reports whether owner holds r: r is in flight under owner's token
// and fencing number. An empty token holds nothing.
func (r *memRecord) heldBy(owner Lease) bool {
	return r.state == StateInFlight && owner.Token != "" &&
		r.token == owner.Token && r.fence == owner.Fence
}

// view returns r as a Claim that did not win sees it at now: without the
// owner's token, with a copy of the stored response.
func (r *memRecord) view(now time.Duration) Record {
	rec := Record{
		State:       r.state,
		Fingerprint: r.fingerprint,
		Owner:       Lease{Fence: r.fence},
		TTL:         r.expires - now,
	}
	if r.state == StateCompleted {
		rec.Response = r.response()
	}
	return rec
}

// response returns a copy of the stored response. Its Header and Body are
// never nil.
func (r *memRecord) response() *Response {
	header := make(http.Header, r.headerNames())
	values := make([]string, len(r.header)/2)
	for i := 0; i < len(r.header); {
		name, first := r.header[i], i/2
		for ; i < len(r.header) && r.header[i] == name; i += 2 {
			values[i/2] = r.header[i+1]
		}
		header[name] = values[first : i/2 : i/2]
	}
	body := make([]byte, len(r.body))
	copy(body, r.body)
	return &Response{Status: r.status, Header: header, Body: body}
}

// headerNames counts the distinct names in r.header.
func (r *memRecord) headerNames() int {
	n := 0
	for i := 0; i < len(r.header); i += 2 {
		if i == 0 || r.header[i] != r.header[i-2] {
			n++
		}
	}
	return n
}

// storedResponse returns a completed record holding a copy of resp: one
// allocation for the header, one for the body. Strings are immutable, so
// the header's names and values are shared, not copied.
func storedResponse(resp *Response) memRecord {
	r := memRecord{state: StateCompleted, status: resp.Status}
	n := 0
	for _, vs := range resp.Header {
		n += len(vs)
	}
	if n > 0 {
		r.header = make([]string, 0, 2*n)
		for name, vs := range resp.Header {
			for _, v := range vs {
				r.header = append(r.header, name, v)
			}
		}
	}
	if len(resp.Body) > 0 {
		r.body = make([]byte, len(resp.Body))
		copy(r.body, resp.Body)
	}
	return r
}
