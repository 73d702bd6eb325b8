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
// whose fields before ';' are decimal: the state, fence, abandoned retention
// in ms (0 once done), 1 if a watcher marked it, the status, and the byte
// lengths of the parts that follow, the body last. The token is empty once done or
// released. While in flight the body part holds the steps (decodeSteps). record.lua
// reads and writes the same layout.
type record struct {
	state              store.State
	fence, abandoned   int64
	status             int
	fingerprint, token string
	header, body       string
}

// errNotRecord is what decodeRecord reports for a value of another shape.
var errNotRecord = errors.New("the key holds no record")

// encodeInFlight returns a new in-flight record under token with fence 1.
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

// decodeRecord reads a record and checks it as record.lua's decode does; a
// fence or retention has at most 15 digits, so Lua's numbers hold it exactly.
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

// decimal reads s, one or more decimal digits and nothing else.
func decimal(s string) (int64, bool) {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// stored returns r as a record this caller found, with ttl left on it.
func (r record) stored(ttl time.Duration) (store.Record, error) {
	return foundRecord(r.state, r.fingerprint, r.fence, max(ttl, 0), r.status, r.header, r.body)
}
