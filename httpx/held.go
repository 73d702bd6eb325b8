package httpx

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
)

// Held is an http.ResponseWriter that holds back the whole response (status,
// headers and body) until Send writes it to the client; one never sent is
// simply dropped. The middleware uses it when the response may be sent only
// after the handler's work has been committed.
//
// The handler starts from a copy of the headers already set on the wrapped
// writer. As with net/http's own writer, the headers sent (and stored) are
// those set when the status was written; later changes count only as the
// values of trailers. The whole body is held in memory, however large.
// Flush is a no-op (nothing can reach the client early) and Hijack is not
// supported. Unwrap returns the wrapped writer, so http.ResponseController
// still reaches its deadlines.
type Held struct {
	w      http.ResponseWriter
	header http.Header
	sent   http.Header // a copy of header taken when the status was written
	status int
	body   []byte
	most   int64 // the body length sent declares, or -1 for none (or no body allowed)

	outerTrailers []string // trailers set on w before the handler ran
}

// NewHeld returns a Held response for w.
func NewHeld(w http.ResponseWriter) *Held {
	h := w.Header()
	return &Held{w: w, header: h.Clone(), outerTrailers: trailerNames(h, h)}
}

// Header returns the held header map.
func (h *Held) Header() http.Header { return h.header }

// WriteHeader holds code as the status; only the first call counts, and
// 1xx codes are dropped. A code outside 100..999 panics at once, as
// net/http's own writer does.
func (h *Held) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("httpx: invalid WriteHeader code %v", code))
	}
	if h.status == 0 && code >= 200 {
		h.status, h.sent, h.most = code, h.header.Clone(), -1
		if n, ok := declaredLength(h.sent); ok && bodyAllowed(code) {
			h.most = n
		}
	}
}

// Write holds p as part of the body, implying the status 200. As
// net/http's own writer does, it refuses with http.ErrContentLength, and
// holds nothing of, a p that would take the body past the Content-Length
// the handler declared.
func (h *Held) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	if h.most >= 0 && int64(len(h.body)+len(p)) > h.most {
		return 0, http.ErrContentLength
	}
	h.body = append(h.body, p...)
	return len(p), nil
}

// Flush does nothing: a held response cannot reach the client early.
func (h *Held) Flush() {}

// FlushError does nothing and returns nil, as Flush.
func (h *Held) FlushError() error { return nil }

// Hijack is not supported on a held response.
func (h *Held) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, fmt.Errorf("httpx: hijack of a held response: %w", http.ErrNotSupported)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (h *Held) Unwrap() http.ResponseWriter { return h.w }

// Status returns the held status: 200 if the handler wrote nothing.
func (h *Held) Status() int { return max(h.status, http.StatusOK) }

// Wrote reports whether the handler wrote a status or any body.
func (h *Held) Wrote() bool { return h.status != 0 }

// Body returns the held body.
func (h *Held) Body() []byte { return h.body }

// SentHeader returns the headers Send sends: as they were when the status
// was written or, if the handler wrote nothing, as it left them.
func (h *Held) SentHeader() http.Header {
	if h.sent != nil {
		return h.sent
	}
	return h.header
}

// ShortOfLength reports whether the held body is shorter than the
// Content-Length the handler declared: sent, net/http would end the
// connection instead of the response. The response to a HEAD request has
// no body to compare, and is never short.
func (h *Held) ShortOfLength(method string) bool {
	return method != http.MethodHead && shortOfDeclared(h.Status(), h.SentHeader(), int64(len(h.body)))
}

// AddsTrailers reports whether the handler gave the held response
// trailers, declared in its Trailer header or set under
// http.TrailerPrefix, beyond those already set on the wrapped writer when
// the Held was made (by a middleware outside, which sets them again on a
// replay).
func (h *Held) AddsTrailers() bool {
	return addsTrailers(h.outerTrailers, h.SentHeader(), h.header)
}

// Send writes the held response to the wrapped writer as the handler would
// have written it: SentHeader replaces the headers set on it, then come the
// status (200 if none was written) and the body, and then the header map
// as the handler left it, from which net/http takes the trailers' values.
func (h *Held) Send() {
	replaceHeader(h.w.Header(), h.SentHeader())
	h.w.WriteHeader(h.Status())
	_, _ = h.w.Write(h.body)
	replaceHeader(h.w.Header(), h.header)
}

// replaceHeader makes dst hold the fields of src and no others.
func replaceHeader(dst, src http.Header) {
	clear(dst)
	for name, values := range src {
		dst[name] = values
	}
}
