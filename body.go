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

// bufferedBody reads a request body that the middleware has read whole
// into memory, in place of the original: the handler's body, and the one
// the scope, route and fingerprint functions may read.
type bufferedBody struct{ bytes.Reader }

func (b *bufferedBody) Close() error { return nil }

// newBufferedBody returns a bufferedBody that reads data from its start.
func newBufferedBody(data []byte) *bufferedBody {
	b := new(bufferedBody)
	b.Reset(data)
	return b
}

// readBody reads r's whole body, at most limit bytes; a request without a
// body reads as empty (nil). A longer body, by its Content-Length or by
// what arrives, is errBodyTooLarge; so is a body that an
// http.MaxBytesReader around it (an outer, smaller limit) cut off.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	return readAtMost(r.Body, r.ContentLength, limit)
}

// firstRead is the most readAtMost allocates before body bytes arrive: an
// announced Content-Length is a claim, not bytes, and a client that
// announces a large body and sends nothing must not cost the server that
// much memory.
const firstRead = 4 << 10

// readAtMost reads body to its end; if it holds more than limit bytes it
// returns errBodyTooLarge. The buffer starts at size (the announced length,
// when known: >= 0) or firstRead, whichever is less, and doubles as bytes
// fill it, never past what size and limit allow, so a body of the
// announced length ends in a buffer of that length.
func readAtMost(body io.Reader, size, limit int64) ([]byte, error) {
	most := limit + 1 // room for one byte over the limit, to detect it
	if size >= 0 {
		most = min(size+1, most) // room to read the end of the body
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

// grow returns buf, which is full, in a buffer of twice its capacity, or of
// most if that is less but still more than buf holds (a body longer than
// announced grows on by doubling).
func grow(buf []byte, most int64) []byte {
	next := int64(2 * cap(buf))
	if most > int64(cap(buf)) {
		next = min(next, most)
	}
	return append(make([]byte, 0, next), buf...)
}

// lingerBytes and lingerTime bound what drainRefused reads of a body it
// refuses.
const (
	lingerBytes = 4 << 20
	lingerTime  = 5 * time.Second
)

// drainRefused prepares the 413 of a request whose body is over the limit:
// it reads and discards what the client is still sending, up to
// lingerBytes within lingerTime: a server that answers and closes the
// connection while its client still sends resets it, and the client then
// loses the answer. A body announced as longer than that is not read, nor
// one whose client waits for 100 Continue before sending it; and none is
// read if the connection's read deadline cannot be set to bound it.
func drainRefused(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= lingerBytes && !expectsContinue(r) {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(lingerTime)) == nil {
			_, _ = io.CopyN(io.Discard, r.Body, lingerBytes)
			_ = rc.SetReadDeadline(time.Time{})
		}
	}
}

// expectsContinue reports whether r's client waits for a 100 Continue
// response before it sends the body.
func expectsContinue(r *http.Request) bool {
	return r.ProtoAtLeast(1, 1) && strings.EqualFold(r.Header.Get("Expect"), "100-continue")
}
