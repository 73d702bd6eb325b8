package idempotency

import (
	"net/http"
	"net/url"
	"strings"
)

// RouteWithHost is a route function for WithRoute: the request's host
// (lower case, no trailing dot, no port 80 or 443), then the default
// route's path. It keeps virtual hosts apart; a retry sent to another name
// of the same service then runs again.
func RouteWithHost(r *http.Request) string {
	return requestHost(r) + requestPath(r)
}

// requestHost drops both default ports whatever the scheme: behind a proxy
// that ends TLS the server cannot tell which one the client used.
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

// requestPath is the default route: the path from r.RequestURI, decoded,
// so mounts under http.StripPrefix stay apart; r.URL.Path when there is no
// path. Decoding makes /a%62 and /ab one route, so a retry a gateway
// re-spelled finds its record (and gets 422, not a second run).
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

// absoluteFormPath returns the path of an absolute-form target, "/" if it
// has none, or "" for any other form.
func absoluteFormPath(target string) string {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || strings.Contains(scheme, "/") {
		return ""
	}
	_, path, _ := strings.Cut(rest, "/")
	return "/" + path
}
