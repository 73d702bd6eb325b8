package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// A record is one string:
//
//	state,fence,abandoned,waited,status,#fp,#token,#header;<fp><token><header><body>
//
// where the first eight fields are decimal numbers: the state (1 in
// flight, 2 completed, 3 unreplayable), the fencing number, the abandoned
// retention in milliseconds (0 once done), 1 if a watcher marked the
// record, the status (0 unless completed), and the byte lengths of the
// fingerprint, the owner's token (empty once released) and the encoded
// header, which follow, the body last. record.lua reads and writes the
// same layout.
type record struct {
	state              store.State
	fence, abandoned   int64
	status             int
	fingerprint, token string
	header, body       string
}

// errNotRecord is what decodeRecord reports for a value of another shape.
var errNotRecord = errors.New("the key holds no record")

// encodeInFlight returns the record a claim of a key with no record
// writes: in flight under token with fence 1.
func encodeInFlight(fingerprint, token string, abandonedMs int64) string {
	b := make([]byte, 0, 48+len(fingerprint)+len(token))
	b = append(b, "1,1,"...)
	b = strconv.AppendInt(b, abandonedMs, 10)
	b = append(b, ",0,0,"...)
	b = strconv.AppendInt(b, int64(len(fingerprint)), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(len(token)), 10)
	b = append(b, ",0;"...)
	b = append(b, fingerprint...)
	b = append(b, token...)
	return string(b)
}

// decodeRecord reads a record, as record.lua's decode does: a state of
// one digit, 1 to 3, a waited of 0 or 1, a fence and an abandoned
// retention of at most 15 digits (so that Lua's numbers hold them
// exactly), and lengths that fit what follows.
func decodeRecord(v string) (record, error) {
	head, rest, ok := strings.Cut(v, ";")
	if !ok {
		return record{}, errNotRecord
	}
	var n [8]int64
	var fields [8]string
	for i := range n {
		field, more, found := strings.Cut(head, ",")
		x, ok := decimal(field)
		if found != (i < len(n)-1) || !ok {
			return record{}, errNotRecord
		}
		n[i], head = x, more
		fields[i] = field
	}
	if len(fields[0]) != 1 || n[0] < 1 || n[0] > 3 || len(fields[3]) != 1 || n[3] > 1 ||
		len(fields[1]) > 15 || len(fields[2]) > 15 {
		return record{}, errNotRecord
	}
	var parts [3]string
	for i, length := range n[5:] {
		if length > int64(len(rest)) {
			return record{}, errNotRecord
		}
		parts[i], rest = rest[:length], rest[length:]
	}
	return record{
		state: store.State(n[0]), fence: n[1], abandoned: n[2], status: int(n[4]),
		fingerprint: parts[0], token: parts[1], header: parts[2], body: rest,
	}, nil
}

// decimal reads s, one or more decimal digits and nothing else, as
// record.lua's pattern reads a number.
func decimal(s string) (int64, bool) {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// stored returns the store.Record of r, a record this caller did not
// claim, with ttl the time left on the key.
func (r record) stored(ttl time.Duration) (store.Record, error) {
	return foundRecord(r.state, r.fingerprint, r.fence, max(ttl, 0), r.status, r.header, r.body)
}
