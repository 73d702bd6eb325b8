package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

var errBodyTooLarge = errors.New("idempotency: request body too large")

// bufferedBody is a request body read whole into memory, handed on to the
// handler in place of the original. Its buffer comes from a pool and goes
// back to it when the request is done (release).
type bufferedBody struct {
	bytes.Reader
	data []byte
	buf  *[]byte // the pooled buffer that data lies in, if any
}

func (b *bufferedBody) Close() error { return nil }

// maxPooledBody is the largest body buffer kept for reuse: a rare large
// body does not pin its memory in the pool.
const maxPooledBody = 64 << 10

// bodyBuffers holds body buffers (*[]byte) of requests that are done.
var bodyBuffers sync.Pool

// release hands b's buffer back to the pool, once the handler, and every
// function given the body, has returned: net/http does not let a handler
// read its request body after it returns. b then reads as empty, so a read
// that comes later all the same finds no bytes rather than another
// request's.
func (b *bufferedBody) release() {
	if b.buf != nil && cap(b.data) <= maxPooledBody {
		*b.buf = b.data // with the room it grew to
		bodyBuffers.Put(b.buf)
	}
	b.data, b.buf = nil, nil
	b.rewind()
}

func (b *bufferedBody) contents() []byte { return b.data }

// rewind makes the next read start again at the first byte.
func (b *bufferedBody) rewind() { b.Reset(b.data) }

// read reads r's whole body into b, at most limit bytes. A longer body, by
// its Content-Length or by what arrives, is errBodyTooLarge; so is a body
// that an http.MaxBytesReader around it (an outer, smaller limit) cut off.
func (b *bufferedBody) read(r *http.Request, limit int64) error {
	if r.ContentLength > limit {
		return errBodyTooLarge
	}
	if r.Body != nil && r.Body != http.NoBody {
		b.buf, _ = bodyBuffers.Get().(*[]byte)
		if b.buf == nil {
			b.buf = new([]byte)
		}
		data, err := readAtMost((*b.buf)[:0], r.Body, r.ContentLength, limit)
		b.data = data
		if err != nil {
			return err
		}
	}
	b.rewind()
	return nil
}

// maxPrealloc is the most readAtMost allocates before body bytes arrive:
// an announced Content-Length is a claim, not bytes, and a client that
// announces a large body and sends nothing must not cost the server that
// much memory.
const maxPrealloc = 64 << 10

// readAtMost reads body to its end, appending to buf (empty, perhaps with
// room from an earlier request); if it holds more than limit bytes it
// returns errBodyTooLarge. size, when known (>= 0), sizes a buffer with
// less room, up to maxPrealloc, so a body of the announced length is read
// without growing it; a longer one grows as its bytes arrive. The buffer is
// returned, with what was read, even with an error.
func readAtMost(buf []byte, body io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 {
		size = 512
	}
	if want := min(size, limit, maxPrealloc) + 1; int64(cap(buf)) < want {
		buf = make([]byte, 0, want)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return buf, errBodyTooLarge
			}
			return buf, err
		}
	}
}
