package httpx

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
)

// Held is an http.ResponseWriter that holds back the whole response, in
// memory, until Send writes it to the client; one never sent is dropped.
// As with net/http's writer, the headers sent are those set when the status
// was written; later changes count only as trailers' values. Flush is a
// no-op and Hijack is not supported.
type Held struct {
	w      http.ResponseWriter
	header http.Header
	sent   http.Header // header when the status was written
	status int
	body   []byte
	most   int64 // the body length sent declares, or -1

	outerTrailers []string // set on w before the handler ran
}

// NewHeld returns a Held response for w, starting from a copy of its header.
func NewHeld(w http.ResponseWriter) *Held {
	h := w.Header()
	return &Held{w: w, header: h.Clone(), outerTrailers: trailerNames(h, h)}
}

func (h *Held) Header() http.Header { return h.header }

// WriteHeader holds code as the status; only the first call counts, 1xx
// codes are dropped, and a code outside 100..999 panics.
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

// Write holds p, implying the status 200. A p that would take the body past
// the declared Content-Length is refused with http.ErrContentLength.
func (h *Held) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	if h.most >= 0 && int64(len(h.body)+len(p)) > h.most {
		return 0, http.ErrContentLength
	}
	h.body = append(h.body, p...)
	return len(p), nil
}

// Flush does nothing.
func (h *Held) Flush() {}

// FlushError does nothing and returns nil.
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

func (h *Held) Body() []byte { return h.body }

// SentHeader returns the headers Send sends.
func (h *Held) SentHeader() http.Header {
	if h.sent != nil {
		return h.sent
	}
	return h.header
}

// ShortOfLength reports whether the held body is shorter than the declared
// Content-Length (never for HEAD).
func (h *Held) ShortOfLength(method string) bool {
	return method != http.MethodHead && shortOfDeclared(h.Status(), h.SentHeader(), int64(len(h.body)))
}

// AddsTrailers reports whether the handler gave the response trailers
// beyond those set on the wrapped writer before it ran.
func (h *Held) AddsTrailers() bool {
	return addsTrailers(h.outerTrailers, h.SentHeader(), h.header)
}

// Send writes the held response to the wrapped writer as the handler would
// have, trailers included.
func (h *Held) Send() {
	replaceHeader(h.w.Header(), h.SentHeader())
	h.w.WriteHeader(h.Status())
	_, _ = h.w.Write(h.body)
	replaceHeader(h.w.Header(), h.header)
}

func replaceHeader(dst, src http.Header) {
	clear(dst)
	for name, values := range src {
		dst[name] = values
	}
}
