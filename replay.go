package idempotency

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// replayedHeader marks a response served from the store.
const replayedHeader = "Idempotent-Replayed"

// replay writes a stored response: its status, its allowed headers and its
// body, plus Idempotent-Replayed: true.
func replay(w http.ResponseWriter, resp *store.Response, allowed map[string]bool) {
	h := w.Header()
	for name, values := range resp.Header {
		if allowed[name] && !neverStored[name] {
			h[name] = values[:len(values):len(values)] // an append copies, never writes into the store's
		}
	}
	h.Set(replayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// keepAllowed deletes from h every header that may not be stored and
// replayed.
func keepAllowed(h http.Header, allowed map[string]bool) {
	for name := range h {
		if !allowed[name] || neverStored[name] {
			delete(h, name)
		}
	}
}
