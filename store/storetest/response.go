package storetest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// sampleResponse is a small JSON response such as a payment API returns.
// Each call returns a new one.
func sampleResponse() *store.Response {
	return &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/payments/pay_123"},
			"Link":         {`</payments>; rel="collection"`, `</receipts/7>; rel="receipt"`},
		},
		Body: []byte(`{"id":"pay_123","amount":1000,"currency":"eur"}`),
	}
}

// requireSameResponse requires got to be want exactly, header values in
// order; a nil and an empty header, or body, count as the same.
func requireSameResponse(t *testing.T, want, got *store.Response) {
	t.Helper()
	require.NotNil(t, got, "a completed record returns its response")
	require.Equal(t, want.Status, got.Status, "status")
	require.Equal(t, len(want.Header), len(got.Header), "header names: want %q, got %q", want.Header, got.Header)
	for name, values := range want.Header {
		require.Contains(t, got.Header, name, "header name")
		require.Equal(t, values, got.Header[name], "values of header %q, in order", name)
	}
	require.Equal(t, len(want.Body), len(got.Body), "body length")
	if len(want.Body) > 0 {
		require.Equal(t, want.Body, got.Body, "body bytes")
	}
}

// roundTrip requires resp, completed under key, to come back exactly.
func roundTrip(t *testing.T, s store.Store, key string, resp *store.Response) {
	t.Helper()
	owner := mustClaim(t, s, key, "fp", longLease)
	complete(t, s, key, owner, resp)
	requireCompleted(t, s, key, "fp", resp)
}

// testBinaryBodiesRoundTrip: bodies of any bytes come back byte for byte.
func testBinaryBodiesRoundTrip(t *testing.T, s store.Store) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	large := make([]byte, 256<<10)
	_, _ = rand.NewChaCha8([32]byte{'s', 't', 'o', 'r', 'e'}).Read(large)
	bodies := []struct {
		name   string
		status int
		body   []byte
	}{
		{"every-byte", http.StatusOK, every},
		{"every-byte-reversed", http.StatusAccepted, reversed(every)},
		{"empty", http.StatusNoContent, []byte{}},
		{"nil", http.StatusFound, nil},
		{"large", http.StatusUnprocessableEntity, large},
	}
	for _, b := range bodies {
		roundTrip(t, s, "body-"+b.name, &store.Response{
			Status: b.status,
			Header: http.Header{"Content-Type": {"application/octet-stream"}},
			Body:   b.body,
		})
	}
}

// reversed returns a reversed copy of b.
func reversed(b []byte) []byte {
	r := make([]byte, len(b))
	for i, c := range b {
		r[len(b)-1-i] = c
	}
	return r
}

// testHeadersRoundTrip: every header value comes back, in order, byte for
// byte, including bytes that are not UTF-8 (HTTP allows any from 0x80
// up), which a backend encoding headers as JSON text must escape.
func testHeadersRoundTrip(t *testing.T, s store.Store) {
	odd := []string{
		"",
		"  leading and trailing spaces  ",
		"tab\there",
		`a, b; c="d, e"`,
		"café ☕ 日本語",
		"latin-1 \xe9t\xe9, raw \x80\xfe\xff",
		"\xc3\x28 invalid UTF-8",
		`{"json":"looking","n":1}`,
		"\\ backslash \\u0041",
		strings.Repeat("long-", 800),
		strings.Repeat("longer than 64 KiB ", 4000),
	}
	header := http.Header{
		"Content-Type":  {"application/json; charset=utf-8"},
		"Location":      {"/payments/pay_123"},
		"Etag":          {`"v1"`},
		"Last-Modified": {"Mon, 30 Nov 2026 12:00:00 GMT"},
		"Link":          {`</a>; rel="a"`, `</b>; rel="b"`, `</a>; rel="a"`},
		"X-Odd":         odd,
	}
	for i := range 40 {
		values := make([]string, 1+i%3)
		for j := range values {
			values[j] = fmt.Sprintf("value %d.%d %s", i, j, odd[(i+j)%len(odd)])
		}
		header[fmt.Sprintf("X-Header-%02d", i)] = values
	}
	roundTrip(t, s, "headers", &store.Response{Status: 299, Header: header, Body: []byte("ok")})
	roundTrip(t, s, "no-headers", &store.Response{Status: http.StatusOK, Body: []byte("ok")})
	roundTrip(t, s, "empty-headers", &store.Response{Status: http.StatusOK, Header: http.Header{}, Body: []byte("ok")})
}

// testResponseIsOnlyLent: a caller that reuses the response's memory after
// Complete does not change the stored response.
func testResponseIsOnlyLent(t *testing.T, s store.Store) {
	resp := sampleResponse()
	want := sampleResponse()
	owner := mustClaim(t, s, "lent", "fp", longLease)
	complete(t, s, "lent", owner, resp)
	resp.Header["Link"][0] = "</changed>"
	clear(resp.Header)
	resp.Header["Content-Type"] = []string{"text/plain"}
	copy(resp.Body, "overwritten")
	requireCompleted(t, s, "lent", "fp", want)
}
