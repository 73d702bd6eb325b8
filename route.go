package idempotency

import (
	"net/http"
	"net/url"
	"strings"
)

// RouteWithHost is a route function for WithRoute: the host a request was
// sent to, then the default route's path. It keeps apart virtual hosts that
// must never share records; but another name of one service (an IP, another
// DNS name) is then another route, and a retry sent through it runs again.
// The host is in lower case, without a trailing dot, and without its port
// if that is empty, 80 or 443.
func RouteWithHost(r *http.Request) string {
	return requestHost(r) + requestPath(r)
}

// requestHost is r.Host as RouteWithHost writes it. Both default ports are
// dropped whatever the scheme: behind a proxy that ends TLS the server
// cannot tell which one the client used.
func requestHost(r *http.Request) string {
	host := r.Host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		switch host[i+1:] {
		case "", "80", "443":
			host = host[:i]
		}
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

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
