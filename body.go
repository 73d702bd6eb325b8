package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

var errBodyTooLarge = errors.New("idempotency: request body too large")

// bufferedBody replaces a request body the middleware has read whole.
type bufferedBody struct{ bytes.Reader }

func (b *bufferedBody) Close() error { return nil }

func newBufferedBody(data []byte) *bufferedBody {
	b := new(bufferedBody)
	b.Reset(data)
	return b
}

// readBody reads r's whole body, nil if none. A body over limit, announced
// or sent, or cut off by an outer http.MaxBytesReader, is errBodyTooLarge.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	return readAtMost(r.Body, r.ContentLength, limit)
}

// firstRead is the most readAtMost allocates before bytes arrive: a
// client announcing a large body and sending nothing must not cost that
// much memory.
const firstRead = 4 << 10

// readAtMost reads body to its end, or errBodyTooLarge past limit. The
// buffer doubles as it fills, capped so a body of the announced size (-1:
// unknown) ends in a buffer of that size.
func readAtMost(body io.Reader, size, limit int64) ([]byte, error) {
	most := limit + 1 // one byte over detects the limit
	if size >= 0 {
		most = min(size+1, most) // room to read EOF
	}
	buf := make([]byte, 0, min(most, firstRead))
	for {
		if len(buf) == cap(buf) {
			buf = grow(buf, most)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return nil, errBodyTooLarge
			}
			return nil, err
		}
	}
}

// grow returns full buf in a buffer of twice its capacity, or of most if
// that is less yet larger.
func grow(buf []byte, most int64) []byte {
	next := int64(2 * cap(buf))
	if most > int64(cap(buf)) {
		next = min(next, most)
	}
	return append(make([]byte, 0, next), buf...)
}

const (
	lingerBytes = 4 << 20
	lingerTime  = 5 * time.Second
)

// drainRefused discards what a client refused with 413 is still sending,
// up to lingerBytes within lingerTime: closing while the client sends
// resets the connection, and the client loses the answer. It reads nothing
// for a longer announced body, a client awaiting 100 Continue, or a
// connection whose read deadline cannot be set.
func drainRefused(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= lingerBytes && !expectsContinue(r) {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
			_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
			_ = rc.SetReadDeadline(time.Time{})
		}
	}
}

func expectsContinue(r *http.Request) bool {
	return r.ProtoAtLeast(1, 1) && strings.EqualFold(r.Header.Get("Expect"), "100-continue")
}
