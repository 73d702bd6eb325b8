package idempotency_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

func TestReplayedHeaders(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range []string{"Location", "Content-Type", "ETag", "Last-Modified", "Link",
			"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate", "Connection",
			"Keep-Alive", "Upgrade", "X-Request-Id", "X-Trace"} {
			w.Header().Add(name, "v-"+name)
		}
		w.Header().Add("Link", "second-link")
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New(idempotency.WithReplayHeaders("x-request-id"))(h)
	post(mw, "k", "{}")
	got := post(mw, "k", "{}").Header
	for _, name := range []string{"Location", "Content-Type", "ETag", "Last-Modified", "X-Request-Id"} {
		require.Equal(t, []string{"v-" + name}, got.Values(name), name)
	}
	require.Equal(t, []string{"v-Link", "second-link"}, got.Values("Link"))
	for _, name := range []string{"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate",
		"Connection", "Keep-Alive", "Upgrade", "X-Trace"} {
		require.Empty(t, got.Values(name), name)
	}
}

// neverStoredHeaders are the headers SPEC §4 says are never stored or
// replayed: credentials, cookies and the hop-by-hop headers, spelled as
// they are usually written.
var neverStoredHeaders = []string{
	"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate",
	"Proxy-Authorization", "Connection", "Keep-Alive", "TE", "Trailer",
	"Transfer-Encoding", "Upgrade",
}

// recordPlanter answers every Claim with a completed record for the same
// request whose stored response is resp, as a store written by another
// process with a longer allow-list, or an older version, might.
type recordPlanter struct {
	store.Store
	resp *store.Response
}

func (s recordPlanter) Claim(_ context.Context, _, fp, _ string, _ time.Duration) (store.Record, bool, error) {
	return store.Record{State: store.StateCompleted, Fingerprint: fp, Response: s.resp, TTL: time.Hour}, false, nil
}

// TestReplayFiltersStoredHeaders: the headers of a stored response are
// checked again when it is replayed: credentials, cookies, hop-by-hop
// headers and headers off the allow-list are dropped even if the store
// holds them, while allow-listed ones such as Content-Type are replayed.
func TestReplayFiltersStoredHeaders(t *testing.T) {
	header := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/payments/1"},
		"X-Request-Id": {"req-1"},
		"X-Internal":   {"secret"},
	}
	for _, name := range neverStoredHeaders {
		header[http.CanonicalHeaderKey(name)] = []string{"stored-" + name}
	}
	s := recordPlanter{Store: store.NewMemory(), resp: &store.Response{
		Status: http.StatusCreated, Header: header, Body: []byte(`{"id":1}`),
	}}
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithReplayHeaders("X-Request-Id"))(h)

	resp := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, `{"id":1}`, readAll(t, resp))
	require.Zero(t, h.runs.Load())
	require.Equal(t, []string{"application/json"}, resp.Header.Values("Content-Type"))
	require.Equal(t, []string{"/payments/1"}, resp.Header.Values("Location"))
	require.Equal(t, []string{"req-1"}, resp.Header.Values("X-Request-Id"))
	require.Empty(t, resp.Header.Values("X-Internal"), "off the allow-list")
	for _, name := range neverStoredHeaders {
		require.Empty(t, resp.Header.Values(name), name)
	}
}

// TestReplayedHeadersAreCopies: a middleware outside this one that changes
// a replayed header value in place changes that one response only, not
// the stored record that later duplicates get.
func TestReplayedHeadersAreCopies(t *testing.T) {
	mw := idempotency.New()(&paymentHandler{})
	scribbler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw.ServeHTTP(w, r)
		if values := w.Header()["Location"]; len(values) > 0 {
			values[0] = "/scribbled"
		}
	})
	post(scribbler, "k", "{}")
	post(scribbler, "k", "{}") // a replay, scribbled on after the middleware wrote it
	third := post(scribbler, "k", "{}")
	require.Equal(t, "true", third.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "/payments/1", post(mw, "k", "{}").Header.Get("Location"))
}

// TestReplayLeavesOutHeadersTheHandlerRemoved: a replayable header that a
// middleware outside this one sets and the handler removes was not in the
// first response, so it is not in the replay either, whatever the outer
// middleware sets again: a Cache-Control, and a Content-Type in place of
// the one net/http sniffed from the body.
func TestReplayLeavesOutHeadersTheHandlerRemoved(t *testing.T) {
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Del("Cache-Control")
		w.Header().Del("Content-Type")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("<html><body>paid</body></html>"))
	}))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		mw.ServeHTTP(w, r)
	})
	first := post(outer, "k", "{}")
	replay := post(outer, "k", "{}")
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Empty(t, first.Header.Values("Cache-Control"))
	for _, name := range []string{"Cache-Control", "Content-Type"} {
		require.Equal(t, first.Header.Values(name), replay.Header.Values(name), name)
	}
}

// TestReplayKeepsRepresentationHeaders: the headers that say how to read
// the stored bytes are replayed with them: Content-Encoding of a body a
// compressing middleware inside this one gzipped, Content-Range of a 206
// from http.ServeContent, Content-Disposition of a download.
func TestReplayKeepsRepresentationHeaders(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"id":"pay_1"}`))
	require.NoError(t, zw.Close())
	compressed := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Disposition", `attachment; filename="pay_1.json"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(gz.Bytes())
	}))
	first := post(compressed, "zipped", "{}")
	replay := post(compressed, "zipped", "{}")
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, readAll(t, first), readAll(t, replay))
	for _, name := range []string{"Content-Encoding", "Content-Disposition"} {
		require.Equal(t, first.Header.Values(name), replay.Header.Values(name), name)
	}

	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ranged := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "receipt.txt", modified, strings.NewReader("receipt body"))
	}))
	firstPart := func(r *http.Request) { r.Header.Set("Range", "bytes=0-6") }
	first = post(ranged, "ranged", "{}", firstPart)
	replay = post(ranged, "ranged", "{}", firstPart)
	require.Equal(t, http.StatusPartialContent, replay.StatusCode)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "bytes 0-6/12", replay.Header.Get("Content-Range"))
	require.Equal(t, readAll(t, first), readAll(t, replay))
}

// TestReplayKeepsSuppressedContentType: a handler that sets Content-Type to
// nil tells net/http to send none and not to sniff one; its replay sends
// none either, rather than a type net/http sniffs from the stored body.
func TestReplayKeepsSuppressedContentType(t *testing.T) {
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("<html><body>receipt</body></html>"))
	})))
	defer srv.Close()
	send := func() *http.Response {
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/receipts", strings.NewReader("{}"))
		require.NoError(t, err)
		r.Header.Set("Idempotency-Key", "untyped")
		resp, err := srv.Client().Do(r)
		require.NoError(t, err)
		return resp
	}
	first, replay := send(), send()
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Empty(t, first.Header.Values("Content-Type"), "the first response")
	require.Empty(t, replay.Header.Values("Content-Type"), "the replay")
	require.Equal(t, readAll(t, first), readAll(t, replay))
}

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

// TestWrongContentLengthIsNotReplayed: a handler whose body does not
// match the Content-Length it declared (shorter: net/http ends the
// connection; longer: the rest is refused) gets its client a broken
// response. Its key is done but not replayable, in either mode, so a
// retry reads a whole answer, 409 not-replayable, instead of the same
// broken response for as long as the record is kept.
func TestWrongContentLengthIsNotReplayed(t *testing.T) {
	for _, tc := range []struct{ name, length string }{{"declared longer", "10"}, {"declared shorter", "3"}} {
		for mode, s := range bothModes() {
			t.Run(tc.name+", "+mode, func(t *testing.T) {
				srv := httptest.NewServer(idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Length", tc.length)
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, "hello")
				})))
				defer srv.Close()
				first := postTo(t, srv.URL, "k", "{}")
				_, err := io.ReadAll(first.Body)
				require.Error(t, err, "the first response is broken")
				requireProblem(t, postTo(t, srv.URL, "k", "{}"), http.StatusConflict, idempotency.ProblemNotReplayable)
			})
		}
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
	for name, s := range bothModes() {
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

func TestServeContentIsReplayed(t *testing.T) {
	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "receipt.txt", modified, strings.NewReader("receipt body"))
	})))
	defer srv.Close()
	first := postTo(t, srv.URL, "k", "{}")
	dup := postTo(t, srv.URL, "k", "{}")
	for _, resp := range []*http.Response{first, dup} {
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
		require.Equal(t, modified.Format(http.TimeFormat), resp.Header.Get("Last-Modified"))
		require.Equal(t, "receipt body", readAll(t, resp))
	}
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
}

// TestHeadOverHTTP2IsReplayed: with HEAD protected, a HEAD response whose
// handler writes a body over HTTP/2 (where net/http fails the body writes
// once the headers are sent) is complete for its client, and is replayed.
func TestHeadOverHTTP2IsReplayed(t *testing.T) {
	var runs atomic.Int64
	mw := idempotency.New(idempotency.WithMethods(http.MethodHead))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("first line\n"))
		_, _ = w.Write(bytes.Repeat([]byte("x"), 8000))
	}))
	srv := httptest.NewUnstartedServer(mw)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	head := func() (*http.Response, error) {
		req, err := http.NewRequest(http.MethodHead, srv.URL+"/receipt", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", "k")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return nil, err
		}
		return resp, resp.Body.Close()
	}
	first, err := head()
	require.NoError(t, err)
	require.Equal(t, "HTTP/2.0", first.Proto)
	require.Equal(t, http.StatusOK, first.StatusCode)
	// Over HTTP/2 the headers of a HEAD response can reach the client
	// before the handler returns and the key is completed, so a duplicate
	// may still find it in flight (409, no body to tell more).
	var second *http.Response
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := head()
		if assert.NoError(c, err) && assert.NotEqual(c, http.StatusConflict, resp.StatusCode) {
			second = resp
		}
	}, 2*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, second.StatusCode)
	require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, runs.Load())
}
