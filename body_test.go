package idempotency_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestBodyReachesHandlerIntact(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	body := strings.Repeat(`{"k":"v"}`, 1000)
	require.Equal(t, body, readAll(t, post(mw, "k", body)))
}

// TestBodyReadByAScopeReachesTheHandlerWhole: a scope function that reads
// the body (here ParseForm, for a tenant sent as a form field) does not
// consume it: the handler still gets every byte.
func TestBodyReadByAScopeReachesTheHandlerWhole(t *testing.T) {
	var got string
	scope := idempotency.WithScope(func(r *http.Request) string {
		_ = r.ParseForm()
		return r.PostForm.Get("tenant")
	})
	srv := httptest.NewServer(idempotency.New(scope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	})))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader("tenant=t1&amount=5"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "k")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "tenant=t1&amount=5", got)
}

// TestBodyReadBeforeTheClaim: the scope, route and fingerprint functions
// each read the whole body from r.Body, and the handler then gets it
// whole too.
func TestBodyReadBeforeTheClaim(t *testing.T) {
	const body = `{"amount":5}`
	var seen string
	readBody := func(r *http.Request) string {
		b, _ := io.ReadAll(r.Body)
		seen = string(b)
		return "t1"
	}
	for name, opt := range map[string]idempotency.Option{
		"scope":       idempotency.WithScope(readBody),
		"route":       idempotency.WithRoute(readBody),
		"fingerprint": idempotency.WithFingerprint(func(r *http.Request, _ []byte) string { return readBody(r) }),
	} {
		t.Run(name, func(t *testing.T) {
			seen = ""
			resp := post(idempotency.New(opt)(&paymentHandler{}), "k", body)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, body, seen, "what the function read")
			require.Equal(t, body, readAll(t, resp), "what the handler read")
		})
	}
}

// TestRequestWithoutABodyKeepsNoBody: a protected request that has no
// body reaches the handler with http.NoBody, as it does without a key.
func TestRequestWithoutABodyKeepsNoBody(t *testing.T) {
	var noBody []bool
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noBody = append(noBody, r.Body == http.NoBody)
	})))
	defer srv.Close()
	for _, key := range []string{"", "k"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	require.Equal(t, []bool{true, true}, noBody, "without a key, then with one")
}

// gatedWriter passes on what it is given only once its gate opens, as a
// slow client connection does.
type gatedWriter struct {
	gate chan struct{}
	got  chan string
}

func (g gatedWriter) Write(p []byte) (int, error) {
	<-g.gate
	g.got <- string(p)
	return len(p), nil
}

// TestBodyReadAfterTheMiddlewareReturned: a handler may go on reading its
// body after the middleware has returned (under http.TimeoutHandler, which
// answers 503 and leaves the handler running), and reads its own bytes even
// once later requests have come and gone, never theirs. The middleware
// therefore gives every body its own buffer.
func TestBodyReadAfterTheMiddlewareReturned(t *testing.T) {
	g := gatedWriter{gate: make(chan struct{}), got: make(chan string, 1)}
	slow := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(g, r.Body) })
	timedOut := idempotency.New()(http.TimeoutHandler(slow, 20*time.Millisecond, "timeout"))
	require.Equal(t, http.StatusServiceUnavailable, post(timedOut, "a", strings.Repeat("A", 1000)).StatusCode)

	later := idempotency.New()(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }))
	for i := range 20 {
		post(later, fmt.Sprint("b", i), strings.Repeat("B", 1000))
	}
	close(g.gate)
	require.Equal(t, strings.Repeat("A", 1000), <-g.got, "the first handler read another request's body")
}

// TestStalledBodiesCostWhatArrived: connections that declare a 1 MiB body
// and send none of it cost the middleware little more heap than they cost a
// bare handler that reads its body: the buffer grows as bytes arrive, not
// to the declared length.
func TestStalledBodiesCostWhatArrived(t *testing.T) {
	const conns, target = 1000, 20 << 10
	readBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) })
	stalledBodiesHeap(t, readBody, conns) // warms what the first server allocates once
	bare := stalledBodiesHeap(t, readBody, conns)
	protected := stalledBodiesHeap(t, idempotency.New()(readBody), conns)
	t.Logf("heap per stalled connection: bare %d B, middleware %d B, over bare %d B (target at most %d)",
		bare, protected, protected-bare, target)
	require.LessOrEqual(t, protected-bare, int64(target))
}

// stalledBodiesHeap opens n connections to h, each sending a request that
// declares a 1 MiB body and then nothing, and returns the heap each costs
// once every request is waiting for its body.
func stalledBodiesHeap(t *testing.T, h http.Handler, n int) int64 {
	var reading sync.WaitGroup
	reading.Add(n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &firstReadSignal{ReadCloser: r.Body, done: reading.Done}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	before := heapAfterGC()
	clients := make([]net.Conn, n)
	for i := range clients {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		defer conn.Close()
		_, err = fmt.Fprintf(conn, "POST /payments HTTP/1.1\r\nHost: a.example\r\nIdempotency-Key: k-%d\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", i, 1<<20)
		require.NoError(t, err)
		clients[i] = conn
	}
	reading.Wait()
	return int64(heapAfterGC()-before) / int64(n)
}

// firstReadSignal is a request body that calls done on its first Read.
type firstReadSignal struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *firstReadSignal) Read(p []byte) (int, error) {
	b.once.Do(b.done)
	return b.ReadCloser.Read(p)
}

func heapAfterGC() uint64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}

// silentBody announces nothing and fails at once, as a client that sent
// headers and no body bytes before going away.
type silentBody struct{}

func (silentBody) Read([]byte) (int, error) { return 0, errors.New("client sent nothing") }

func (silentBody) Close() error { return nil }

// TestAnnouncedLengthIsNotPreallocated: a request that announces a large
// Content-Length and sends nothing costs the server little memory, however
// large the body limit.
func TestAnnouncedLengthIsNotPreallocated(t *testing.T) {
	mw := idempotency.New(idempotency.WithMaxBodyBytes(1 << 30))(&paymentHandler{})
	r := httptest.NewRequest(http.MethodPost, "/payments", nil)
	r.Header.Set("Idempotency-Key", "k")
	r.Body, r.ContentLength = silentBody{}, 256<<20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusBadRequest, w.Code, "an unreadable body")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for a body of 256 MiB announced, 0 sent")
}

// TestBodyOfEverySizeReachesTheHandlerIntact: bodies around the sizes at
// which the buffer grows reach the handler byte for byte, whether their
// length is announced, unknown (chunked), or announced short, as a
// request made in the process may be.
func TestBodyOfEverySizeReachesTheHandlerIntact(t *testing.T) {
	var got []byte
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	for _, size := range []int{1, 4095, 4096, 4097, 8193, 100_000, 1 << 20} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 7)
		}
		for _, announced := range []int64{int64(size), -1, 10} {
			t.Run(fmt.Sprintf("%d bytes announced as %d", size, announced), func(t *testing.T) {
				got = nil
				r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(string(body)))
				r.ContentLength = announced
				r.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d-%d", size, announced))
				w := httptest.NewRecorder()
				mw.ServeHTTP(w, r)
				require.Equal(t, http.StatusOK, w.Code)
				require.Equal(t, body, got)
			})
		}
	}
}

func TestOversizedBodyGets413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithMaxBodyBytes(10))(h)
	require.Equal(t, http.StatusCreated, post(mw, "at-limit", "0123456789").StatusCode)
	requireProblem(t, post(mw, "k", "0123456789x"), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	unknownLength := func(r *http.Request) { r.ContentLength = -1 }
	requireProblem(t, post(mw, "k2", "0123456789x", unknownLength), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.EqualValues(t, 1, h.runs.Load())
	require.Equal(t, http.StatusCreated, post(mw, "k", "small").StatusCode, "a 413 leaves the key unused")
}

// TestOuterMaxBytesReaderIs413: a body cut off by an http.MaxBytesReader
// outside the middleware, with a limit below the middleware's, gets 413
// like a body over the middleware's own limit.
func TestOuterMaxBytesReaderIs413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 10)
		mw.ServeHTTP(w, r)
	})
	resp := post(outer, "k", `{"amount":1000,"currency":"eur"}`, func(r *http.Request) { r.ContentLength = -1 })
	requireProblem(t, resp, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.Zero(t, h.runs.Load())
}

// TestOversizedUploadReadsThe413: a client that sends 2 MiB to a route
// with the default 1 MiB limit, on a fresh connection each time, reads the
// 413 body-too-large problem, not a connection reset, whether its length
// is announced or not, and from Go's client and from curl alike.
func TestOversizedUploadReadsThe413(t *testing.T) {
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran for an oversized body")
	})))
	defer srv.Close()
	upload := bytes.Repeat([]byte("x"), 2<<20)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, announced := range []bool{true, false} {
		for i := range 50 {
			var body io.Reader = bytes.NewReader(upload)
			if !announced {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", body)
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "k")
			resp, err := client.Do(req)
			require.NoError(t, err, "try %d, length announced: %v", i, announced)
			requireProblem(t, resp, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
		}
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not found: the Go client's tries passed, curl's were not made")
	}
	file := filepath.Join(t.TempDir(), "upload")
	require.NoError(t, os.WriteFile(file, upload, 0o600))
	for i := range 20 {
		out, err := exec.Command(curl, "-sS", "--data-binary", "@"+file, "-H", "Idempotency-Key: k",
			"-w", "\n%{http_code}", srv.URL+"/payments").Output()
		require.NoError(t, err, "curl try %d", i)
		cut := bytes.LastIndexByte(out, '\n')
		body, status := out[:cut], out[cut+1:]
		require.Equal(t, "413", string(status), "curl try %d", i)
		var problem struct{ Type string }
		require.NoError(t, json.Unmarshal(body, &problem))
		require.Equal(t, idempotency.ProblemBodyTooLarge, problem.Type)
	}
}

// TestStalledOversizedUploadIsAnswered: a client that announces 2 MiB,
// sends 1.5 MiB and then nothing still gets its 413, once the read of the
// rest has waited its bounded time.
func TestStalledOversizedUploadIsAnswered(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(idempotency.New()(http.NotFoundHandler()))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /payments HTTP/1.1\r\nHost: a.example\r\nIdempotency-Key: k\r\n"+
		"Content-Length: %d\r\n\r\n%s", 2<<20, bytes.Repeat([]byte("x"), 3<<19))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	requireProblem(t, resp, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
}
