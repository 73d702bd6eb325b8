package storetest

import (
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// BenchFingerprint and BenchToken are what a backend's benchmarks claim
// every key with.
const (
	BenchFingerprint = "9f86d081884c7d659f86d081884c7d659f86d081884c7d659f86d081884c7d65"
	BenchToken       = "TQ3ZJ5VXQKWX6NMM7BYTFHRA2E"
)

// BenchResponse returns a new copy of the response a backend's benchmarks
// complete every key with.
func BenchResponse() *store.Response {
	return &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}`),
	}
}
