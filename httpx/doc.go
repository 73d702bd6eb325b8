// Package httpx holds the HTTP pieces the idempotency middleware is built
// from: a Recorder that passes a handler's response through to the client
// while keeping a copy for replay, ParseKey for the Idempotency-Key request
// header, and WriteProblem for RFC 9457 problem+json error responses.
package httpx
