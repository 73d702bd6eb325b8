package idempotency

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// replayedHeader marks a response served from the store.
const replayedHeader = "Idempotent-Replayed"

// replay writes a stored response: its status, its replayable headers and
// its body, plus Idempotent-Replayed: true. Headers are checked again here,
// in case another process with a longer allow-list stored the record.
func (m *middleware) replay(w http.ResponseWriter, resp *store.Response) {
	h := w.Header()
	for name, values := range resp.Header {
		if m.replayable(name) {
			h[name] = values[:len(values):len(values)] // an append copies, never writes into the store's
		}
	}
	h.Set(replayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// replayable reports whether the response header name may be stored and
// replayed: it is on the allow-list and not one of those never stored.
func (m *middleware) replayable(name string) bool {
	return m.replayHeaders[name] && !neverStored[name]
}

// toStore returns the response to store: status, body, and the replayable
// headers of header, which it filters in place and keeps.
func (m *middleware) toStore(status int, header http.Header, body []byte) *store.Response {
	for name := range header {
		if !m.replayable(name) {
			delete(header, name)
		}
	}
	return &store.Response{Status: status, Header: header, Body: body}
}
