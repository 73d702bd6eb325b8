// Package httpx holds the HTTP pieces the idempotency middleware is built
// from: response recorders, ParseKey and WriteProblem.
package httpx
