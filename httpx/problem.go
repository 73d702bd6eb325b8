package httpx

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response the middleware writes itself.
type Problem struct {
	// Type is a URI naming the kind of problem, stable per case. Empty is
	// written as "about:blank", the RFC 9457 default.
	Type string `json:"type"`
	// Title is a short, constant summary for humans. Empty is written as the
	// status text of Status.
	Title string `json:"title"`
	// Status is the HTTP status code, 400..599. Anything else is written, in
	// the header and the body, as 500.
	Status int `json:"status"`
	// Detail explains this occurrence to the client. It must never carry
	// internal error text. Omitted from the body when empty.
	Detail string `json:"detail,omitempty"`
}

// WriteProblem writes p as an application/problem+json response: it removes
// the headers set before that describe some other content (ETag,
// Last-Modified, Content-Encoding, which would make the JSON unreadable,
// and the others otherContent lists), sets Content-Type, Content-Length,
// Cache-Control: no-store and X-Content-Type-Options: nosniff, then writes
// the status and the JSON body, ended by a newline as a terminal or a log
// line wants it. It never panics: a status outside 400..599 is written as
// 500. Other headers already set on w, such as Retry-After, are sent as
// they are.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	// Marshal cannot fail on strings and an int; invalid UTF-8 is replaced.
	body, _ := json.Marshal(p)
	body = append(body, '\n')
	h := w.Header()
	for _, name := range otherContent {
		h.Del(name)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// otherContent are the headers that describe a representation other than
// the problem's, removed before it is written.
var otherContent = []string{
	"ETag", "Last-Modified", "Content-Encoding", "Content-Range", "Content-Disposition",
	"Content-Language", "Content-Location", "Content-Digest", "Content-MD5", "Repr-Digest", "Digest",
}
