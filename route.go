package idempotency

import (
	"net/http"
	"net/url"
	"strings"
)

// requestPath is the default route: the path of r as its client sent it
// (r.RequestURI, in origin form or absolute form: http://host/path, as a
// client sends it to a proxy), decoded. A handler mounted under
// http.StripPrefix, which rewrites r.URL.Path, thus keeps its mounts apart.
// A request made in the process, without a RequestURI, or whose RequestURI
// holds no path ("*", or an authority alone), is named by r.URL.Path.
//
// Decoding makes two spellings of one path (/a%62 and /ab) one route, so a
// retry whose path a gateway spelled differently still finds its record
// (its fingerprint, over the path as sent, then tells them apart: 422, not
// a second run); it also makes /a%2Fb and /a/b one route, which WithRoute
// can tell apart.
func requestPath(r *http.Request) string {
	sent, _, _ := strings.Cut(r.RequestURI, "?")
	if !strings.HasPrefix(sent, "/") {
		sent = absoluteFormPath(sent)
	}
	switch {
	case sent == "":
		return r.URL.Path
	case !strings.Contains(sent, "%"):
		return sent // nothing to decode
	}
	path, err := url.PathUnescape(sent)
	if err != nil {
		return r.URL.Path
	}
	return path
}

// absoluteFormPath returns the path of target, a request target in
// absolute form (http://host/path), or "/" if it has none after the host;
// for a target in another form ("*", or an authority alone) it returns "".
func absoluteFormPath(target string) string {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || strings.Contains(scheme, "/") {
		return ""
	}
	_, path, _ := strings.Cut(rest, "/")
	return "/" + path
}
