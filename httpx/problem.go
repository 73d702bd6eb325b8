package httpx

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an RFC 9457 problem details object, the body of every error
// response the middleware writes itself.
type Problem struct {
	// Type is a URI naming the kind of problem; empty is "about:blank".
	Type string `json:"type"`
	// Title is a constant summary; empty is Status's status text.
	Title string `json:"title"`
	// Status is 400..599; anything else is written as 500.
	Status int `json:"status"`
	// Detail explains this occurrence; never internal error text.
	Detail string `json:"detail,omitempty"`
}

// WriteProblem writes p as an application/problem+json response, with
// Cache-Control: no-store and X-Content-Type-Options: nosniff. It removes
// headers set before that describe other content (ETag, Content-Encoding,
// ...) and keeps the others, such as Retry-After.
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
// the problem's.
var otherContent = []string{
	"ETag", "Last-Modified", "Content-Encoding", "Content-Range", "Content-Disposition",
	"Content-Language", "Content-Location", "Content-Digest", "Content-MD5", "Repr-Digest", "Digest",
}
