package idempotency_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestRecordedAndReleasedStatuses(t *testing.T) {
	recorded := []int{200, 201, 202, 204, 301, 302, 304, 400, 403, 404, 410, 422}
	released := []int{408, 409, 425, 429, 500, 502, 503, 504}
	for _, status := range append(recorded, released...) {
		t.Run(http.StatusText(status), func(t *testing.T) {
			h := &paymentHandler{status: status}
			mw := idempotency.New()(h)
			post(mw, "k", "{}")
			second := post(mw, "k", "{}")
			require.Equal(t, status, second.StatusCode)
			if contains(released, status) {
				require.Empty(t, second.Header.Get("Idempotent-Replayed"))
				require.EqualValues(t, 2, h.runs.Load(), "a %d releases the key so a retry runs", status)
				return
			}
			require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
			require.EqualValues(t, 1, h.runs.Load(), "a %d is recorded and replayed", status)
		})
	}
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

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

func TestHeadersChangedAfterWriteHeaderAreNotReplayed(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/a")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("Location", "/changed-too-late")
	})
	mw := idempotency.New()(h)
	post(mw, "k", "{}")
	require.Equal(t, "/a", post(mw, "k", "{}").Header.Get("Location"))
}

func TestPanicReleasesTheKeyAndIsReraised(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New()(h)
	require.PanicsWithValue(t, "boom", func() { post(mw, "k", "{}") })
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode, "the retry runs")
	require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, runs.Load())
}

// TestPanicAfterASuccessReleasesTheKey: a handler that wrote 201 and then
// panicked is released too (SPEC §4: a panic releases), not recorded: its
// response was cut short, and the retry runs it again.
func TestPanicAfterASuccessReleasesTheKey(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
		if runs.Add(1) == 1 {
			panic("after the charge")
		}
	})
	mw := idempotency.New()(h)
	require.PanicsWithValue(t, "after the charge", func() { post(mw, "k", "{}") })
	retry := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, retry.StatusCode)
	require.Empty(t, retry.Header.Get("Idempotent-Replayed"), "the retry runs the handler")
	require.EqualValues(t, 2, runs.Load())
}

// cancelOnRead cancels the request's context while the handler reads the
// body, as a client that disconnects mid-request does.
type cancelOnRead struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnRead) Read(p []byte) (int, error) {
	c.cancel()
	return c.ReadCloser.Read(p)
}

func TestClientDisconnectReleasesTheKey(t *testing.T) {
	started := make(chan struct{})
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-r.Context().Done() // the client went away
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(idempotency.New()(h))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	go func() {
		<-started
		cancel()
	}()
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)

	require.Eventually(t, func() bool {
		resp := postTo(t, srv.URL, "k", "{}")
		return resp.StatusCode == http.StatusCreated
	}, 2*time.Second, 20*time.Millisecond, "once released, the retry runs")
	require.EqualValues(t, 2, runs.Load())
}

func TestHandlerThatWritesNothingIsReplayedAs200(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("ETag", `"v1"`)
	})
	mw := idempotency.New()(h)
	first := post(mw, "k", "{}")
	require.Equal(t, http.StatusOK, first.StatusCode)
	dup := post(mw, "k", "{}")
	require.Equal(t, http.StatusOK, dup.StatusCode)
	require.Equal(t, `"v1"`, dup.Header.Get("ETag"))
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
	require.Empty(t, readAll(t, dup))
	require.EqualValues(t, 1, runs.Load())
}

// notReplayable checks that a handler whose response cannot be stored
// still reaches the client whole, runs once, and that a duplicate gets the
// not-replayable problem.
func notReplayable(t *testing.T, h http.Handler, opts ...idempotency.Option) (first []byte) {
	t.Helper()
	var runs atomic.Int64
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(idempotency.New(opts...)(counted))
	defer srv.Close()
	resp := postTo(t, srv.URL, "k", "{}")
	first, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	// A hijacked response can reach the client before the handler returns
	// and the key is marked, so a duplicate may still find it in flight.
	var dupBody string
	require.Eventually(t, func() bool {
		dup := postTo(t, srv.URL, "k", "{}")
		require.Equal(t, http.StatusConflict, dup.StatusCode)
		dupBody = readAll(t, dup)
		return !strings.Contains(dupBody, idempotency.ProblemKeyInFlight)
	}, 2*time.Second, 10*time.Millisecond)
	require.Contains(t, dupBody, `"type":"`+idempotency.ProblemNotReplayable+`"`)
	require.EqualValues(t, 1, runs.Load())
	return first
}

func TestOversizedResponseIsNotReplayable(t *testing.T) {
	big := make([]byte, 64<<10)
	_, _ = rand.Read(big)
	got := notReplayable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, bytes.NewReader(big))
	}), idempotency.WithMaxResponseBytes(1024))
	require.Equal(t, big, got, "the client got the whole body")
}

func TestFlushedResponseIsNotReplayable(t *testing.T) {
	got := notReplayable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part one,")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "part two")
	}))
	require.Equal(t, "part one,part two", string(got))
}

func TestHijackedResponseIsNotReplayable(t *testing.T) {
	got := notReplayable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "no hijack", http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = buf.Flush()
	}))
	require.Equal(t, "hijacked", string(got))
}

func TestIOCopyAfterWriteHeaderIsReplayedByteForByte(t *testing.T) {
	body := make([]byte, 100<<10)
	_, _ = rand.Read(body)
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, bufio.NewReader(bytes.NewReader(body)))
	})))
	defer srv.Close()
	for i := range 2 {
		resp := postTo(t, srv.URL, "k", "{}")
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, body, got, "response %d", i)
		require.Equal(t, i == 1, resp.Header.Get("Idempotent-Replayed") == "true")
	}
}

// TestIOCopyFromAFailingSourceReleasesTheKey: a handler whose io.Copy
// fails before its first byte may still answer 502, as without the
// middleware; the 502 releases the key and the retry runs the handler again.
func TestIOCopyFromAFailingSourceReleasesTheKey(t *testing.T) {
	var runs atomic.Int64
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if _, err := io.Copy(w, iotest.ErrReader(errors.New("upstream down"))); err != nil {
			http.Error(w, "upstream failed", http.StatusBadGateway)
		}
	})))
	defer srv.Close()
	for i := range 2 {
		resp := postTo(t, srv.URL, "k", "{}")
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, "response %d", i)
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "response %d", i)
		require.Equal(t, "upstream failed\n", readAll(t, resp))
	}
	require.Equal(t, int64(2), runs.Load())
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

func TestResponseControllerReachesTheRealWriter(t *testing.T) {
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	require.Equal(t, http.StatusCreated, postTo(t, srv.URL, "k", "{}").StatusCode)
}
