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
//   - The first final status (200 or above, or 101) wins; later ones are
//     neither recorded nor passed on; other 1xx codes pass through. Write,
//     a ReadFrom that yields a byte, and Flush imply 200, as in net/http.
//   - Every body byte reaches the client; past limit the copy is dropped
//     and Overflowed reports true.
//   - A flush, a hijack, a failed or short write, an overflow, or trailers
//     the handler adds make the response not replayable (Replayable).
//
// Unwrap returns the wrapped writer, for http.ResponseController. Memory
// is reused after Release. One goroutine at a time uses a Recorder.
type Recorder struct {
	w     http.ResponseWriter
	limit int

	status     int
	header     http.Header
	snap       *snapshot // the memory header lies in, until Release
	body       []byte
	bodyBuf    *[]byte // the pooled buffer body lies in, until Release
	written    int64
	overflowed bool
	flushed    bool
	hijacked   bool
	cutShort   bool // a body write failed or was short
	head       bool // the response to a HEAD request: no body reaches the client

	outerTrailers []string // trailers set on w before the handler ran
}

// NewRecorder returns a Recorder that passes everything through to w and
// keeps a copy of at most limit body bytes. A limit of zero or less keeps no
// copy: the first body byte overflows it. Nothing is allocated for the body
// until the handler writes it.
func NewRecorder(w http.ResponseWriter, limit int) *Recorder {
	r := &Recorder{}
	r.Reset(w, limit)
	return r
}

// Reset makes r a new Recorder for w, as NewRecorder(w, limit) returns, so
// that a Recorder can live inside a larger per-request struct.
func (r *Recorder) Reset(w http.ResponseWriter, limit int) {
	h := w.Header()
	*r = Recorder{w: w, limit: max(limit, 0), outerTrailers: trailerNames(h, h)}
}

// Header returns the wrapped writer's header map.
func (r *Recorder) Header() http.Header {
	return r.w.Header()
}

// WriteHeader passes code on and records it as the status if it is the first
// final code. See Recorder for the rules on 1xx codes and repeated calls.
// After a hijack the call is passed on (net/http then reports the misuse) and
// nothing is recorded.
func (r *Recorder) WriteHeader(code int) {
	switch {
	case r.hijacked:
		r.w.WriteHeader(code)
	case r.status != 0:
		// Already written: net/http would ignore it and log a superfluous
		// call; ignoring it here keeps the recorded status what the client saw.
	case code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols:
		r.w.WriteHeader(code)
	default:
		snap := takeSnapshot(r.w.Header())
		// The wrapped writer panics on an invalid code; record only a code
		// it accepted.
		r.w.WriteHeader(code)
		r.status, r.header, r.snap = code, snap.header, snap
	}
}

// implicitOK writes the status 200 if no status was written, as net/http
// does before the first body byte or flush of a connection not hijacked.
func (r *Recorder) implicitOK() {
	if r.status == 0 && !r.hijacked {
		r.WriteHeader(http.StatusOK)
	}
}

// Write writes p to the client, writing the status 200 first if no status
// was written, and keeps a copy of the bytes the wrapped writer accepted
// while the body stays within the limit.
func (r *Recorder) Write(p []byte) (int, error) {
	r.implicitOK()
	n, err := r.w.Write(p)
	r.record(p[:n])
	if (err != nil || n < len(p)) && !errors.Is(err, http.ErrBodyNotAllowed) && !r.head {
		// A body for a 204 or 304 is refused, not cut short: the client
		// got the whole response, which has no body. So does the client of
		// a HEAD request, whatever the writer says of its body.
		r.cutShort = true
	}
	return n, err
}

// record counts p as written and keeps a copy of it, or stops keeping
// once the body exceeds the limit. The copy kept until then stays where
// it is until Release, for a Body taken before.
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

// maxPooledBody is the largest body buffer kept for reuse: a rare large
// response does not pin its memory in the pool.
const maxPooledBody = 64 << 10

// bodyBuffers holds the body buffers (*[]byte) of Released Recorders.
var bodyBuffers = sync.Pool{New: func() any { return new([]byte) }}

// releaseBody drops the kept body, handing its buffer back to the pool
// unless it grew too large to be worth keeping.
func (r *Recorder) releaseBody() {
	if r.bodyBuf != nil && cap(r.body) <= maxPooledBody {
		*r.bodyBuf = r.body // with the room it grew to
		bodyBuffers.Put(r.bodyBuf)
	}
	r.body, r.bodyBuf = nil, nil
}

// copyBufs holds the buffers ReadFrom copies through while capturing.
var copyBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// ReadFrom copies src to the client and returns the number of bytes copied.
// While the body is still being kept, the bytes go through Write so the copy
// stays exact, and the status 200 is implied only by the first byte, so a
// handler whose source fails at once may still answer 502. Once the body has
// overflowed the limit, the rest is handed to the wrapped writer's
// io.ReaderFrom when it has one, so net/http can still use sendfile for
// large bodies.
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

// copyCapturing copies src through Write until src ends (done), an error
// occurs, or, while capturing, the body overflows the limit.
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

// Flush flushes the response to the client, as FlushError does. A wrapped
// writer that cannot flush makes it a no-op, never a panic.
func (r *Recorder) Flush() {
	_ = r.FlushError()
}

// FlushError flushes the wrapped writer through http.ResponseController,
// writing the status 200 first if none was written. A wrapped writer that
// cannot flush (no writer along its Unwrap chain has a Flush or FlushError
// method) makes it a no-op that returns an error wrapping
// http.ErrNotSupported, and leaves the status to the handler. Unless that
// error is returned, the response is marked flushed: the client may have
// seen part of it before the handler finished.
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

// canFlush reports whether http.ResponseController can flush w: w, or a
// writer its Unwrap chain reaches first, has a FlushError or Flush method.
// A Recorder (the middleware applied twice) can flush if the writer it
// wraps can. Another writer whose Flush method cannot flush what is under
// it is not detected.
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

// Hijack takes over the connection through http.ResponseController. On
// success the response is marked hijacked; otherwise the error is returned,
// wrapping http.ErrNotSupported when the wrapped writer cannot hijack.
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
// written, or nil if no status has been written or the snapshot was
// released. The map is the Recorder's own, valid until Release; the caller
// may change it.
func (r *Recorder) HeaderSnapshot() http.Header {
	return r.header
}

// Release hands the memory of the header snapshot and of the body's copy
// back, for later Recorders to reuse: HeaderSnapshot and Body then return
// nil, and a map or slice they returned before must no longer be used. Call
// it once done with the record. A Recorder never released costs nothing but
// the garbage collector's work.
func (r *Recorder) Release() {
	if r.snap != nil {
		r.snap.release()
		r.snap, r.header = nil, nil
	}
	r.releaseBody()
}

// Body returns the kept copy of the body: every byte written while the body
// stayed within the limit, or nil once it overflowed. The slice is the
// Recorder's own and must not be modified; it stays valid after the handler
// returns, until Release.
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

// Overflowed reports whether the body grew beyond the limit, so that no
// complete copy was kept.
func (r *Recorder) Overflowed() bool {
	return r.overflowed
}

// Flushed reports whether the response was flushed to the client before the
// handler finished.
func (r *Recorder) Flushed() bool {
	return r.flushed
}

// Hijacked reports whether the handler took over the connection.
func (r *Recorder) Hijacked() bool {
	return r.hijacked
}

// ForHead marks the response as the answer to a HEAD request, whose body
// never reaches the client: a failed body write then does not make it cut
// short (HTTP/2 fails body writes once a HEAD response's headers are sent).
func (r *Recorder) ForHead() {
	r.head = true
}

// CutShort reports whether a body write failed or the wrapped writer took
// only part of it (the client hung up, or a timeout handler outside took
// over the response): the kept body is not all the handler wrote.
func (r *Recorder) CutShort() bool {
	return r.cutShort
}

// Replayable reports whether the recorded status, header snapshot and body
// are the complete response the handler wrote and the client was sent: it
// was not flushed, hijacked, larger than the limit or cut short, its body
// is not shorter than its Content-Length (net/http ends the connection
// then), and the handler added no trailers. Call it once the handler has
// returned: trailers may be set until then, and the body written.
func (r *Recorder) Replayable() bool {
	return !r.overflowed && !r.flushed && !r.hijacked && !r.cutShort &&
		(r.head || !shortOfDeclared(max(r.status, http.StatusOK), r.SentHeader(), r.written)) &&
		!addsTrailers(r.outerTrailers, r.SentHeader(), r.Header())
}

// SentHeader returns the headers the client is sent, as Held's does: the
// snapshot taken when the status was written or, if the handler wrote
// nothing, the header map as it is (net/http sends it with the 200 it
// implies). That map is the wrapped writer's own: copy it to keep it.
func (r *Recorder) SentHeader() http.Header {
	if r.status == 0 {
		return r.Header()
	}
	return r.header
}
