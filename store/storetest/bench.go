package storetest

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// BenchFingerprint and BenchToken are the fingerprint (64 hex digits, as
// of a SHA-256) and the owner token that a backend's benchmarks claim
// every key with.
const (
	BenchFingerprint = "9f86d081884c7d659f86d081884c7d659f86d081884c7d659f86d081884c7d65"
	BenchToken       = "TQ3ZJ5VXQKWX6NMM7BYTFHRA2E"
)

// BenchResponse returns the response that a backend's benchmarks complete
// every key with: a payment API's 201 with a JSON body, a Content-Type and
// a Location. Each call returns a new one.
func BenchResponse() *store.Response {
	return &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}`),
	}
}
