// Package idempotency is net/http middleware that honours the
// Idempotency-Key request header: the first request with a key runs the
// handler and its response is stored; every duplicate, on whichever process
// it lands, gets that stored response replayed instead of running the
// handler again.
package idempotency

import (
	"net/http"
)

// New returns the middleware. Misconfiguration panics here, never at
// request time.
func New(opts ...Option) func(http.Handler) http.Handler {
	c := defaultConfig()
	for _, opt := range opts {
		opt(c)
	}
	return func(next http.Handler) http.Handler {
		return next // TODO(core): replaced by the real middleware in this session
	}
}
