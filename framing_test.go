package idempotency_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// exchange is one request to a real server and what its client got.
type exchange struct {
	resp *http.Response
	body string
}

// sendTo sends method with key to srv through a real client and reads the
// whole response, trailers included.
func sendTo(t *testing.T, srv *httptest.Server, method, key string) exchange {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+"/receipts", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return exchange{resp: resp, body: string(body)}
}

// TestReplayKeepsContentLength: a body net/http does not measure itself
// (over its 2 KiB buffer, or the empty body of a HEAD response) keeps the
// Content-Length its handler set when it is replayed, rather than going out
// chunked or without a length.
func TestReplayKeepsContentLength(t *testing.T) {
	for _, tc := range []struct {
		method string
		size   int
	}{{http.MethodPost, 4096}, {http.MethodHead, 100}} {
		t.Run(tc.method, func(t *testing.T) {
			srv := httptest.NewServer(idempotency.New(idempotency.WithMethods(tc.method))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.ServeContent(w, r, "receipt.bin", time.Time{}, bytes.NewReader(make([]byte, tc.size)))
				})))
			defer srv.Close()
			first, replay := sendTo(t, srv, tc.method, "sized"), sendTo(t, srv, tc.method, "sized")
			require.Equal(t, "true", replay.resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, int64(tc.size), first.resp.ContentLength)
			require.Equal(t, first.resp.ContentLength, replay.resp.ContentLength)
			require.Equal(t, first.resp.TransferEncoding, replay.resp.TransferEncoding)
			require.Equal(t, first.body, replay.body)
		})
	}
}

// TestReplayOfAChunkedBodyKeepsItsContentType: a handler that sets
// Transfer-Encoding and no Content-Type gets none from net/http's HTTP/1
// server, which sniffs only when it frames the body itself, and a sniffed
// one from its HTTP/2 server, which ignores Transfer-Encoding; either way
// the replay carries what the first response did.
func TestReplayOfAChunkedBodyKeepsItsContentType(t *testing.T) {
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprint("http2=", http2), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Transfer-Encoding", "chunked")
				_, _ = io.WriteString(w, "<html><body>receipt</body></html>")
			})))
			srv.EnableHTTP2 = http2
			srv.StartTLS()
			defer srv.Close()
			first, replay := sendTo(t, srv, http.MethodPost, "chunked"), sendTo(t, srv, http.MethodPost, "chunked")
			require.Equal(t, http2, first.resp.ProtoMajor == 2)
			require.Equal(t, "true", replay.resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, http2, first.resp.Header.Get("Content-Type") != "", "sniffed over HTTP/2 only")
			require.Equal(t, first.resp.Header.Values("Content-Type"), replay.resp.Header.Values("Content-Type"))
			require.Equal(t, first.body, replay.body)
		})
	}
}

// TestResponseWithTrailersIsNotReplayable: trailers are set after the
// headers are sent and are not stored, so a response that has any, declared
// in a Trailer header or set under http.TrailerPrefix, reaches its client
// whole and is then done but not replayable: a duplicate gets 409
// not-replayable, never the body without its trailers. The body is over
// net/http's 2 KiB buffer, so that it is chunked and its trailers sent even
// when none is declared.
func TestResponseWithTrailersIsNotReplayable(t *testing.T) {
	body := strings.Repeat("paid", 1024)
	trailers := map[string]func(http.Header){
		"declared": func(h http.Header) { h.Set("X-Checksum", "abc123") },
		"prefixed": func(h http.Header) { h.Set(http.TrailerPrefix+"X-Checksum", "abc123") },
	}
	for name, setTrailer := range trailers {
		t.Run(name, func(t *testing.T) {
			runs := 0
			srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				if name == "declared" {
					w.Header().Set("Trailer", "X-Checksum")
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, body)
				setTrailer(w.Header())
			})))
			defer srv.Close()
			first := sendTo(t, srv, http.MethodPost, "trailed")
			require.Equal(t, http.StatusCreated, first.resp.StatusCode)
			require.Equal(t, body, first.body)
			require.Equal(t, "abc123", first.resp.Trailer.Get("X-Checksum"))
			dup := sendTo(t, srv, http.MethodPost, "trailed")
			require.Equal(t, http.StatusConflict, dup.resp.StatusCode)
			require.Contains(t, dup.body, idempotency.ProblemNotReplayable)
			require.Equal(t, 1, runs)
		})
	}
}

// TestTrailersSetOutsideKeepTheResponseReplayable: a middleware outside
// this one that declares a trailer (Server-Timing, say) and sets it after
// the handler returns does so again on the replay; the response stays
// replayable, in the transactional mode too.
func TestTrailersSetOutsideKeepTheResponseReplayable(t *testing.T) {
	stores := map[string]store.Store{"plain": store.NewMemory(), "transactional": &txMemory{Memory: store.NewMemory()}}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			runs := 0
			inner := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "paid")
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "Server-Timing")
				inner.ServeHTTP(w, r)
				w.Header().Set("Server-Timing", "app;dur=1")
			}))
			defer srv.Close()
			first, replay := sendTo(t, srv, http.MethodPost, "timed"), sendTo(t, srv, http.MethodPost, "timed")
			require.Equal(t, "app;dur=1", first.resp.Trailer.Get("Server-Timing"))
			require.Equal(t, http.StatusCreated, replay.resp.StatusCode, replay.body)
			require.Equal(t, "true", replay.resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, "app;dur=1", replay.resp.Trailer.Get("Server-Timing"))
			require.Equal(t, first.body, replay.body)
			require.Equal(t, 1, runs)
		})
	}
}
