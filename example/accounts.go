package main

import "net/http"

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
