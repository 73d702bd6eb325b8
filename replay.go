package idempotency

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// replayedHeader marks a response served from the store.
const replayedHeader = "Idempotent-Replayed"

// replay writes a stored response: its status, its replayable headers and
// its body, plus Idempotent-Replayed: true. Headers are checked again here,
// in case another process with a longer allow-list stored the record. A
// replayable header that is in w.Header() (a middleware outside this one
// set it) but not in the record is removed: the handler removed it, so
// the first response went without it. The
// header values are copied, because the store may share its response with
// every duplicate and a middleware outside this one may change the values
// it finds in w.Header() in place: into one array with the replay mark,
// sized for one value a name (the header map is walked once; a name with
// more values grows the array, and the values copied before stay where
// they are, copies all the same).
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

// replayable reports whether the response header name may be stored and
// replayed: it is on the allow-list, which never holds a name that
// neverStored lists (WithReplayHeaders refuses those).
func (m *middleware) replayable(name string) bool {
	return m.replayHeaders[name]
}

// toStore returns the response to store for r: status, body, and the
// replayable headers of header, which it filters in place and keeps. A
// Content-Type that the handler set to nil (or to no values) is stored as
// one empty value: net/http sends no Content-Type for it and sniffs none
// from the body, and stores keep values, not names without any, so replay
// turns the empty value back into nil to send the same. A Content-Type of
// one empty value is thus replayed as none. So is a missing Content-Type
// next to a Transfer-Encoding the handler set (never stored itself) on an
// HTTP/1 request: net/http's HTTP/1 server sniffs only a body it frames
// itself, so it sent none. (Its HTTP/2 server sniffs either way, as the
// replay then does.)
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
