package idempotency

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// replayedHeader marks a response served from the store.
const replayedHeader = "Idempotent-Replayed"

// replay writes a stored response plus Idempotent-Replayed: true. Headers
// are filtered again, as another process with a longer allow-list may have
// stored it; a replayable header set outside but absent from the record is
// removed, as the handler removed it. Values are copied (into one array):
// the store shares the response, and outer middleware may edit them.
func (m *middleware) replay(w http.ResponseWriter, resp *store.Response) {
	copies := make([]string, 0, len(resp.Header)+1)
	h := w.Header()
	for name := range h {
		if _, stored := resp.Header[name]; !stored && m.replayable(name) {
			delete(h, name)
		}
	}
	for name, values := range resp.Header {
		switch {
		case !m.replayable(name):
		case name == "Content-Type" && len(values) == 1 && values[0] == "":
			h[name] = nil // see toStore
		default:
			start := len(copies)
			copies = append(copies, values...)
			h[name] = copies[start:len(copies):len(copies)]
		}
	}
	copies = append(copies, "true")
	h[replayedHeader] = copies[len(copies)-1:]
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// replayable reports whether the response header name is on the
// allow-list, which never holds a neverStored name.
func (m *middleware) replayable(name string) bool {
	return m.replayHeaders[name]
}

// toStore returns the response to store, filtering header in place. A
// Content-Type set to nil (net/http then sniffs none) is stored as one
// empty value, since stores drop names without values; replay turns it
// back into nil. So is a missing one beside a handler-set
// Transfer-Encoding on HTTP/1, where net/http does not sniff either.
func (m *middleware) toStore(r *http.Request, status int, header http.Header, body []byte) store.Response {
	if _, typed := header["Content-Type"]; !typed && r.ProtoMajor == 1 && header.Get("Transfer-Encoding") != "" {
		header["Content-Type"] = nil
	}
	for name, values := range header {
		switch {
		case !m.replayable(name):
			delete(header, name)
		case name == "Content-Type" && len(values) == 0:
			header[name] = []string{""}
		}
	}
	return store.Response{Status: status, Header: header, Body: body}
}
