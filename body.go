package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

var errBodyTooLarge = errors.New("idempotency: request body too large")

// bufferedBody is a request body read whole into memory, handed on to the
// handler in place of the original.
type bufferedBody struct {
	bytes.Reader
	data []byte
}

func (b *bufferedBody) Close() error { return nil }

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
		data, err := readAtMost(r.Body, r.ContentLength, limit)
		if err != nil {
			return err
		}
		b.data = data
	}
	b.rewind()
	return nil
}

// maxPrealloc is the most readAtMost allocates before body bytes arrive:
// an announced Content-Length is a claim, not bytes, and a client that
// announces a large body and sends nothing must not cost the server that
// much memory.
const maxPrealloc = 64 << 10

// readAtMost reads body to its end; if it holds more than limit bytes it
// returns errBodyTooLarge. size, when known (>= 0), sizes the buffer, up to
// maxPrealloc, so a body of the announced length is read without growing
// it; a longer one grows as its bytes arrive.
func readAtMost(body io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 {
		size = 512
	}
	buf := make([]byte, 0, min(size, limit, maxPrealloc)+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
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
