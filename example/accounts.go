package main

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
)

// account returns the account r's caller acts for: the API key sent as
// the username of HTTP Basic auth, as Stripe's clients send theirs
// (curl -u sk_test_alice: ...). In this demo every non-empty key is an
// account of its own, named by the key; a real service would look the key
// up and return the id of the account it belongs to. It returns "" for a
// request without credentials.
func account(r *http.Request) string {
	key, _, _ := r.BasicAuth()
	return key
}

// requireAccount answers 401, asking for Basic credentials, a request that
// names no account; others go on to next.
func requireAccount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if account(r) == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="payments"`)
			httpx.WriteProblem(w, httpx.Problem{Status: http.StatusUnauthorized,
				Detail: "send your API key as the username of HTTP Basic auth: curl -u sk_test_alice: ..."})
			return
		}
		next.ServeHTTP(w, r)
	})
}
