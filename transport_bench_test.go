package idempotency_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/seed43327c4c/idempotency"
)

// createdBase answers every request 201 at once, without allocating.
type createdBase struct{ resp http.Response }

func (c *createdBase) RoundTrip(*http.Request) (*http.Response, error) { return &c.resp, nil }

// BenchmarkTransport measures the transport over a base that answers 201
// at once: a request with a key of its own and GetBody (nothing to add), and
// one without a key (the key, its header and the request's copy). Each
// reports the allocations it adds to the base's (allocs-over-base/op).
func BenchmarkTransport(b *testing.B) {
	base := &createdBase{resp: http.Response{StatusCode: http.StatusCreated, Body: http.NoBody}}
	rt := idempotency.NewTransport(base)
	for _, bc := range []struct {
		name   string
		header http.Header
	}{
		{"keyed", http.Header{"Idempotency-Key": {"order-42"}, "Content-Type": {"application/json"}}},
		{"unkeyed", http.Header{"Content-Type": {"application/json"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := strings.NewReader(`{"amount":100}`)
			req, _ := http.NewRequest(http.MethodPost, "http://service.test/payments", body)
			req.Header = bc.header
			send := func(rt http.RoundTripper) {
				body.Reset(`{"amount":100}`)
				req.Body = io.NopCloser(body)
				_, _ = rt.RoundTrip(req)
			}
			alone := testing.AllocsPerRun(100, func() { send(base) })
			wrapped := testing.AllocsPerRun(100, func() { send(rt) })
			b.ReportAllocs()
			for b.Loop() {
				send(rt)
			}
			b.ReportMetric(wrapped-alone, "allocs-over-base/op")
		})
	}
}
