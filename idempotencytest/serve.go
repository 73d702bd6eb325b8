// Package idempotencytest sends requests through a handler wrapped in the
// middleware, for tests and benchmarks; RequireIdempotent tests that an
// application's endpoint runs once per key.
package idempotencytest

import (
	"net/http"
	"net/http/httptest"
	"strings"
)

// Serve sends one request with a JSON body and key as its Idempotency-Key
// (none if "") through h, after applying each edit, and returns the
// response.
func Serve(h http.Handler, method, target, key, body string, edit ...func(*http.Request)) *http.Response {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for _, e := range edit {
		e(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// Post is Serve of a POST /payments.
func Post(h http.Handler, key, body string, edit ...func(*http.Request)) *http.Response {
	return Serve(h, http.MethodPost, "/payments", key, body, edit...)
}
