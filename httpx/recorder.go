package httpx

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
)

// Recorder wraps an http.ResponseWriter, passes everything a handler writes
// through to it unchanged, and records the status, the headers as they
// were when the status was written, and a copy of the body up to a limit.
// The first final status (200 or above, or 101) wins; later ones are
// neither recorded nor passed on; other 1xx codes pass through. Write,
// ReadFrom and Flush imply 200, as in net/http. A Recorder is not safe for
// concurrent use.
type Recorder struct {
	w     http.ResponseWriter
	limit int

	status     int
	header     http.Header
	snap       *snapshot
	body       []byte
	bodyBuf    *[]byte // pooled, until Release
	written    int64
	overflowed bool
	flushed    bool
	hijacked   bool
	cutShort   bool
	head       bool

	outerTrailers []string // set on w before the handler ran
}

// NewRecorder returns a Recorder for w that keeps a copy of at most limit
// body bytes (none if limit <= 0).
func NewRecorder(w http.ResponseWriter, limit int) *Recorder {
	r := &Recorder{}
	r.Reset(w, limit)
	return r
}

// Reset makes r a new Recorder, as NewRecorder(w, limit) returns.
func (r *Recorder) Reset(w http.ResponseWriter, limit int) {
	h := w.Header()
	*r = Recorder{w: w, limit: max(limit, 0), outerTrailers: trailerNames(h, h)}
}

// Header returns the wrapped writer's header map.
func (r *Recorder) Header() http.Header {
	return r.w.Header()
}

// WriteHeader passes code on and records it if it is the first final code.
func (r *Recorder) WriteHeader(code int) {
	switch {
	case r.hijacked:
		r.w.WriteHeader(code)
	case r.status != 0:
		// net/http would ignore it too; the recorded status stays what the
		// client saw.
	case code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols:
		r.w.WriteHeader(code)
	default:
		snap := takeSnapshot(r.w.Header())
		// Recorded after the wrapped writer accepted it (it panics on an
		// invalid code).
		r.w.WriteHeader(code)
		r.status, r.header, r.snap = code, snap.header, snap
	}
}

func (r *Recorder) implicitOK() {
	if r.status == 0 && !r.hijacked {
		r.WriteHeader(http.StatusOK)
	}
}

// Write writes p to the client and keeps a copy of what was accepted.
func (r *Recorder) Write(p []byte) (int, error) {
	r.implicitOK()
	n, err := r.w.Write(p)
	r.record(p[:n])
	if (err != nil || n < len(p)) && !errors.Is(err, http.ErrBodyNotAllowed) && !r.head {
		// A refused body (204, 304) or a HEAD response's is not cut
		// short: the client got the whole response, which has no body.
		r.cutShort = true
	}
	return n, err
}

// record counts p as written and copies it until the body exceeds the
// limit; the copy stays until Release, for a Body taken before.
func (r *Recorder) record(p []byte) {
	r.written += int64(len(p))
	if r.overflowed || len(p) == 0 {
		return
	}
	if len(r.body)+len(p) > r.limit {
		r.overflowed = true
		return
	}
	if r.bodyBuf == nil {
		r.bodyBuf = bodyBuffers.Get().(*[]byte)
		r.body = (*r.bodyBuf)[:0]
	}
	r.body = append(r.body, p...)
}

const maxPooledBody = 64 << 10

var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

func (r *Recorder) releaseBody() {
	if r.bodyBuf != nil && cap(r.body) <= maxPooledBody {
		*r.bodyBuf = r.body
		bodyBuffers.Put(r.bodyBuf)
	}
	r.body, r.bodyBuf = nil, nil
}

var copyBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// ReadFrom copies src to the client; the first byte implies the status 200.
// Past the limit the rest goes to the wrapped writer's io.ReaderFrom, so
// net/http can still use sendfile.
func (r *Recorder) ReadFrom(src io.Reader) (int64, error) {
	var total int64
	if !r.overflowed {
		n, done, err := r.copyCapturing(src)
		total += n
		if done || err != nil {
			return total, err
		}
	}
	if rf, ok := r.w.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(src)
		r.written += n
		return total + n, err
	}
	n, _, err := r.copyCapturing(src)
	return total + n, err
}

// copyCapturing copies src through Write until src ends (done), an error,
// or an overflow.
func (r *Recorder) copyCapturing(src io.Reader) (n int64, done bool, err error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	capturing := !r.overflowed
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := r.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, false, werr
			}
			if nw != nr {
				return n, false, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return n, true, nil
		}
		if rerr != nil {
			return n, false, rerr
		}
		if capturing && r.overflowed {
			return n, false, nil
		}
	}
}

// Flush is FlushError without its error.
func (r *Recorder) Flush() {
	_ = r.FlushError()
}

// FlushError flushes the wrapped writer through http.ResponseController,
// implying 200, and marks the response flushed. A writer that cannot flush
// makes it a no-op returning an error wrapping http.ErrNotSupported.
func (r *Recorder) FlushError() error {
	if canFlush(r.w) {
		r.implicitOK()
	}
	err := http.NewResponseController(r.w).Flush()
	if err == nil || !errors.Is(err, http.ErrNotSupported) {
		r.flushed = true
	}
	return err
}

// canFlush reports whether http.ResponseController can flush w. A Recorder
// (the middleware applied twice) can if the writer it wraps can.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case *Recorder:
			w = t.w
		case interface{ FlushError() error }, http.Flusher:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// Hijack takes over the connection through http.ResponseController, and
// marks the response hijacked.
func (r *Recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	r.hijacked = true
	return conn, rw, nil
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *Recorder) Unwrap() http.ResponseWriter {
	return r.w
}

// Status returns the recorded status, or 0 if the handler wrote nothing.
func (r *Recorder) Status() int {
	return r.status
}

// HeaderSnapshot returns the headers as they were when the status was
// written, or nil; the caller may change the map until Release.
func (r *Recorder) HeaderSnapshot() http.Header {
	return r.header
}

// Release hands the header snapshot and the body's copy back for reuse: a
// map or slice HeaderSnapshot or Body returned must no longer be used.
func (r *Recorder) Release() {
	if r.snap != nil {
		r.snap.release()
		r.snap, r.header = nil, nil
	}
	r.releaseBody()
}

// Body returns the kept copy of the body, or nil once it overflowed. It is
// read-only and valid until Release.
func (r *Recorder) Body() []byte {
	if r.overflowed {
		return nil
	}
	return r.body
}

// Written returns the number of body bytes the wrapped writer accepted.
func (r *Recorder) Written() int64 {
	return r.written
}

// Overflowed reports whether the body grew beyond the limit.
func (r *Recorder) Overflowed() bool {
	return r.overflowed
}

// Flushed reports whether the response was flushed.
func (r *Recorder) Flushed() bool {
	return r.flushed
}

// Hijacked reports whether the handler took over the connection.
func (r *Recorder) Hijacked() bool {
	return r.hijacked
}

// ForHead marks the response as the answer to a HEAD request: a failed body
// write then does not make it cut short (HTTP/2 fails them).
func (r *Recorder) ForHead() {
	r.head = true
}

// CutShort reports whether a body write failed or was short.
func (r *Recorder) CutShort() bool {
	return r.cutShort
}

// Replayable reports whether the record is the complete response the
// client was sent: not flushed, hijacked, overflowed or cut short, no
// shorter than its Content-Length, and without trailers the handler added.
// Call it once the handler has returned.
func (r *Recorder) Replayable() bool {
	return !r.overflowed && !r.flushed && !r.hijacked && !r.cutShort &&
		(r.head || !shortOfDeclared(max(r.status, http.StatusOK), r.SentHeader(), r.written)) &&
		!addsTrailers(r.outerTrailers, r.SentHeader(), r.Header())
}

// SentHeader returns the headers the client is sent: the snapshot or, if
// the handler wrote nothing, the wrapped writer's own map.
func (r *Recorder) SentHeader() http.Header {
	if r.status == 0 {
		return r.Header()
	}
	return r.header
}
