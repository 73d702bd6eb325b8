package httpx

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// result is what one request through a Recorder produced: the recorder after
// the handler returned and the response as the client received it.
type result struct {
	rec  *Recorder
	resp *http.Response
	body []byte
}

// target runs handler h behind a Recorder with the given body limit and
// returns what was recorded and what the client got. mods adjust the request.
type target func(t *testing.T, limit int, h http.HandlerFunc, mods ...func(*http.Request)) result

// targets are the writers a Recorder is tested over: httptest's recorder and
// a real server's response writer, read by a real client.
var targets = map[string]target{"httptest": viaResponseRecorder, "server": viaServer}

func viaResponseRecorder(t *testing.T, limit int, h http.HandlerFunc, mods ...func(*http.Request)) result {
	t.Helper()
	hr := httptest.NewRecorder()
	rec := NewRecorder(hr, limit)
	req := httptest.NewRequest(http.MethodGet, "/file.txt", nil)
	for _, m := range mods {
		m(req)
	}
	h(rec, req)
	resp := hr.Result()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return result{rec: rec, resp: resp, body: body}
}

func viaServer(t *testing.T, limit int, h http.HandlerFunc, mods ...func(*http.Request)) result {
	t.Helper()
	recs := make(chan *Recorder, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := NewRecorder(w, limit)
		h(rec, r)
		recs <- rec
	}))
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/file.txt", nil)
	require.NoError(t, err)
	for _, m := range mods {
		m(req)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return result{rec: awaitRecorder(t, recs), resp: resp, body: body}
}

// awaitRecorder waits for the handler to return its recorder, failing the
// test instead of hanging if the handler never finishes.
func awaitRecorder(t *testing.T, recs <-chan *Recorder) *Recorder {
	t.Helper()
	select {
	case rec := <-recs:
		return rec
	case <-time.After(10 * time.Second):
		require.FailNow(t, "handler did not return")
		return nil
	}
}

// pattern returns n bytes that differ from one position to the next, so a
// dropped, repeated or reordered chunk shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// readerOnly hides every method but Read, so io.Copy must use the writer's
// ReadFrom.
type readerOnly struct{ io.Reader }

func TestRecorderCopyAfterWriteHeader(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			for _, size := range []int{0, 1, 100, 4096, 200 << 10} {
				data := pattern(size)
				res := do(t, 4096, func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/octet-stream")
					w.WriteHeader(http.StatusCreated)
					n, err := io.Copy(w, readerOnly{bytes.NewReader(data)})
					assert.NoError(t, err)
					assert.Equal(t, int64(size), n)
				})
				assert.Equal(t, http.StatusCreated, res.resp.StatusCode)
				assert.Equal(t, data, res.body, "client body, size %d", size)
				assert.Equal(t, http.StatusCreated, res.rec.Status())
				assert.Equal(t, int64(size), res.rec.Written())
				if size <= 4096 {
					assert.False(t, res.rec.Overflowed())
					assert.True(t, res.rec.Replayable())
					assert.Equal(t, data, append([]byte{}, res.rec.Body()...), "kept copy, size %d", size)
				} else {
					assert.True(t, res.rec.Overflowed())
					assert.False(t, res.rec.Replayable())
					assert.Nil(t, res.rec.Body())
				}
			}
		})
	}
}

// fromReaderWriter is a ResponseWriter with its own ReadFrom, counting the
// bytes handed to it.
type fromReaderWriter struct {
	*httptest.ResponseRecorder
	readFrom int64
}

func (w *fromReaderWriter) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(w.ResponseRecorder, src)
	w.readFrom += n
	return n, err
}

func TestRecorderReadFromDelegatesAfterOverflow(t *testing.T) {
	const size, limit = 100 << 10, 1000
	data := pattern(size)
	w := &fromReaderWriter{ResponseRecorder: httptest.NewRecorder()}
	rec := NewRecorder(w, limit)

	n, err := rec.ReadFrom(readerOnly{bytes.NewReader(data)})
	require.NoError(t, err)
	assert.Equal(t, int64(size), n)
	assert.Equal(t, int64(size), rec.Written())
	assert.Equal(t, data, w.Body.Bytes())
	assert.True(t, rec.Overflowed())
	assert.Nil(t, rec.Body())
	// The first chunk went through Write to find the overflow; the rest was
	// handed to the wrapped ReadFrom.
	assert.Positive(t, w.readFrom)
	assert.Less(t, w.readFrom, int64(size))

	// Once overflowed, a further ReadFrom goes straight to the wrapped writer.
	n, err = rec.ReadFrom(readerOnly{bytes.NewReader(data[:10])})
	require.NoError(t, err)
	assert.Equal(t, int64(10), n)
	assert.Equal(t, int64(size+10), rec.Written())
	assert.Equal(t, size+10, w.Body.Len())
}

// failingReader returns its data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestRecorderReadFromError(t *testing.T) {
	boom := errors.New("boom")
	hr := httptest.NewRecorder()
	rec := NewRecorder(hr, 100)
	n, err := rec.ReadFrom(&failingReader{data: []byte("partial"), err: boom})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, int64(7), n)
	assert.Equal(t, "partial", hr.Body.String())
	assert.Equal(t, "partial", string(rec.Body()))
	assert.Equal(t, http.StatusOK, rec.Status())
}

// TestRecorderReadFromLeavesStatusUntilFirstByte: io.Copy from a source
// that fails, or ends, before its first byte writes no status, as with
// net/http's own writer: the handler's 502 or 204 reaches the client and is
// the recorded status.
func TestRecorderReadFromLeavesStatusUntilFirstByte(t *testing.T) {
	sources := map[string]struct {
		src    io.Reader
		status int
	}{
		"failing": {iotest.ErrReader(errors.New("upstream down")), http.StatusBadGateway},
		"empty":   {strings.NewReader(""), http.StatusNoContent},
	}
	for name, do := range targets {
		for source, tc := range sources {
			t.Run(name+"/"+source, func(t *testing.T) {
				res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
					n, _ := io.Copy(w, readerOnly{tc.src})
					assert.Zero(t, n)
					w.WriteHeader(tc.status)
				})
				assert.Equal(t, tc.status, res.resp.StatusCode)
				assert.Equal(t, tc.status, res.rec.Status())
			})
		}
	}
}

func TestRecorderServeContent(t *testing.T) {
	data := pattern(5000)
	modTime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	serve := func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "file.txt", modTime, bytes.NewReader(data))
	}
	for name, do := range targets {
		t.Run(name+"/full", func(t *testing.T) {
			res := do(t, 8192, serve)
			require.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, data, res.body)
			assert.Equal(t, http.StatusOK, res.rec.Status())
			assert.Equal(t, data, res.rec.Body())
			assert.True(t, res.rec.Replayable())
			snap := res.rec.HeaderSnapshot()
			assert.Equal(t, "text/plain; charset=utf-8", snap.Get("Content-Type"))
			assert.Equal(t, "5000", snap.Get("Content-Length"))
			assert.Equal(t, modTime.Format(http.TimeFormat), snap.Get("Last-Modified"))
			assert.Equal(t, "bytes", snap.Get("Accept-Ranges"))
			for _, k := range []string{"Content-Type", "Content-Length", "Last-Modified", "Accept-Ranges"} {
				assert.Equal(t, res.resp.Header.Get(k), snap.Get(k), k)
			}
		})
		t.Run(name+"/range", func(t *testing.T) {
			res := do(t, 8192, serve, func(r *http.Request) { r.Header.Set("Range", "bytes=10-19") })
			require.Equal(t, http.StatusPartialContent, res.resp.StatusCode)
			assert.Equal(t, data[10:20], res.body)
			assert.Equal(t, http.StatusPartialContent, res.rec.Status())
			assert.Equal(t, data[10:20], res.rec.Body())
			assert.Equal(t, "bytes 10-19/5000", res.rec.HeaderSnapshot().Get("Content-Range"))
			assert.Equal(t, "10", res.rec.HeaderSnapshot().Get("Content-Length"))
		})
		t.Run(name+"/not-modified", func(t *testing.T) {
			res := do(t, 8192, serve, func(r *http.Request) {
				r.Header.Set("If-Modified-Since", modTime.Format(http.TimeFormat))
			})
			assert.Equal(t, http.StatusNotModified, res.resp.StatusCode)
			assert.Empty(t, res.body)
			assert.Equal(t, http.StatusNotModified, res.rec.Status())
			assert.Empty(t, res.rec.Body())
		})
	}
}

// A file larger than the limit, served by a real server: the part past the
// limit goes to net/http's own ReadFrom (sendfile), and the client still gets
// every byte.
func TestRecorderServeFileOverLimit(t *testing.T) {
	data := pattern(3 << 20)
	path := filepath.Join(t.TempDir(), "big.bin")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	res := viaServer(t, 64<<10, func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if !assert.NoError(t, err) {
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if !assert.NoError(t, err) {
			return
		}
		http.ServeContent(w, r, "big.bin", fi.ModTime(), f)
	})
	require.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.True(t, bytes.Equal(data, res.body), "client body differs")
	assert.Equal(t, int64(len(data)), res.rec.Written())
	assert.True(t, res.rec.Overflowed())
	assert.False(t, res.rec.Replayable())
	assert.Nil(t, res.rec.Body())
}

func TestRecorderFlush(t *testing.T) {
	t.Run("httptest", func(t *testing.T) {
		res := viaResponseRecorder(t, 100, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "b")
		})
		assert.True(t, res.rec.Flushed())
		assert.False(t, res.rec.Replayable())
		assert.Equal(t, "ab", string(res.body))
		assert.Equal(t, "ab", string(res.rec.Body()))
	})
	t.Run("server", func(t *testing.T) {
		// The handler writes its second chunk only after the client has read
		// the first, which it can only do if the flush reached it.
		clientSaw := make(chan struct{})
		recs := make(chan *Recorder, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			rec := NewRecorder(w, 100)
			defer func() { recs <- rec }()
			rec.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(rec, "first;")
			if !assert.NoError(t, http.NewResponseController(rec).Flush()) {
				return
			}
			select {
			case <-clientSaw:
			case <-time.After(10 * time.Second):
				assert.Fail(t, "client never saw the flushed chunk")
				return
			}
			_, _ = io.WriteString(rec, "second")
		}))
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		assert.Equal(t, http.StatusAccepted, resp.StatusCode)
		first := make([]byte, len("first;"))
		_, err = io.ReadFull(resp.Body, first)
		require.NoError(t, err)
		assert.Equal(t, "first;", string(first))
		close(clientSaw)
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "second", string(rest))
		rec := awaitRecorder(t, recs)
		assert.True(t, rec.Flushed())
		assert.False(t, rec.Replayable())
		assert.Equal(t, http.StatusAccepted, rec.Status())
		assert.Equal(t, "first;second", string(rec.Body()))
	})
}

func TestRecorderFlushFirstImpliesOK(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
				w.(http.Flusher).Flush()
				w.WriteHeader(http.StatusCreated) // too late: 200 is out
			})
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, http.StatusOK, res.rec.Status())
			assert.True(t, res.rec.Flushed())
		})
	}
}

// plainWriter is a ResponseWriter with none of the optional interfaces.
type plainWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *plainWriter) Header() http.Header         { return w.h }
func (w *plainWriter) WriteHeader(code int)        { w.status = code }
func (w *plainWriter) Write(p []byte) (int, error) { return w.body.Write(p) }

func TestRecorderWithoutExtras(t *testing.T) {
	w := &plainWriter{h: http.Header{}}
	rec := NewRecorder(w, 100)

	assert.NotPanics(t, rec.Flush)
	assert.ErrorIs(t, rec.FlushError(), http.ErrNotSupported)
	assert.False(t, rec.Flushed())
	assert.Zero(t, rec.Status(), "a flush that cannot happen implies no status")
	assert.Zero(t, w.status)

	conn, brw, err := rec.Hijack()
	assert.ErrorIs(t, err, http.ErrNotSupported)
	assert.Nil(t, conn)
	assert.Nil(t, brw)
	assert.False(t, rec.Hijacked())

	assert.ErrorIs(t, http.NewResponseController(rec).SetWriteDeadline(time.Now()), http.ErrNotSupported)

	n, err := rec.ReadFrom(readerOnly{bytes.NewReader([]byte("body"))})
	require.NoError(t, err)
	assert.Equal(t, int64(4), n)
	assert.Equal(t, "body", w.body.String())
	assert.Equal(t, http.StatusOK, w.status)
	assert.True(t, rec.Replayable())
}

// TestNestedRecorderFlushThatCannotHappen: a Recorder around a Recorder
// (the middleware applied twice) over a writer that cannot flush has a
// Flush method to call, but no flush happens, so no status is implied.
func TestNestedRecorderFlushThatCannotHappen(t *testing.T) {
	w := &plainWriter{h: http.Header{}}
	inner := NewRecorder(NewRecorder(w, 100), 100)
	assert.ErrorIs(t, inner.FlushError(), http.ErrNotSupported)
	assert.Zero(t, inner.Status())
	assert.Zero(t, w.status)
	inner.WriteHeader(http.StatusBadGateway)
	assert.Equal(t, http.StatusBadGateway, w.status)
}

func TestRecorderHijack(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		const raw = "HTTP/1.1 299 Raw\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
		res := viaServer(t, 100, func(w http.ResponseWriter, _ *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			_, err = brw.WriteString(raw)
			assert.NoError(t, err)
			assert.NoError(t, brw.Flush())
			// Writes after a hijack fail and record nothing.
			_, err = w.Write([]byte("late"))
			assert.ErrorIs(t, err, http.ErrHijacked)
		})
		assert.Equal(t, 299, res.resp.StatusCode)
		assert.Equal(t, "hello", string(res.body))
		assert.True(t, res.rec.Hijacked())
		assert.False(t, res.rec.Replayable())
		assert.Zero(t, res.rec.Status())
		assert.Zero(t, res.rec.Written())
	})
	t.Run("httptest", func(t *testing.T) {
		res := viaResponseRecorder(t, 100, func(w http.ResponseWriter, _ *http.Request) {
			_, _, err := w.(http.Hijacker).Hijack()
			assert.ErrorIs(t, err, http.ErrNotSupported)
		})
		assert.False(t, res.rec.Hijacked())
		assert.True(t, res.rec.Replayable())
	})
}

func TestRecorderStatusOnce(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "ok")
				w.WriteHeader(http.StatusTeapot)
			})
			assert.Equal(t, http.StatusCreated, res.resp.StatusCode)
			assert.Equal(t, http.StatusCreated, res.rec.Status())
			assert.Equal(t, "ok", string(res.body))
		})
	}
}

func TestRecorderWriteImpliesOK(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "hi")
				w.WriteHeader(http.StatusCreated)
			})
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, http.StatusOK, res.rec.Status())
			assert.Equal(t, "hi", string(res.rec.Body()))
		})
	}
}

func TestRecorderInformational(t *testing.T) {
	var got []int
	var hints []textproto.MIMEHeader
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, code)
		hints = append(hints, h)
		return nil
	}}
	res := viaServer(t, 100, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusProcessing)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusEarlyHints) // after the final status: ignored
		_, _ = io.WriteString(w, "done")
	}, func(r *http.Request) {
		*r = *r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
	})
	assert.Equal(t, []int{http.StatusEarlyHints, http.StatusProcessing}, got)
	require.Len(t, hints, 2)
	assert.Equal(t, "</style.css>; rel=preload; as=style", hints[0].Get("Link"))
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, "done", string(res.body))
	assert.Equal(t, http.StatusOK, res.rec.Status())
	assert.Equal(t, "text/plain", res.rec.HeaderSnapshot().Get("Content-Type"))
	assert.Equal(t, "</style.css>; rel=preload; as=style", res.rec.HeaderSnapshot().Get("Link"))
}

func TestRecorderSwitchingProtocolsIsFinal(t *testing.T) {
	hr := httptest.NewRecorder()
	rec := NewRecorder(hr, 100)
	rec.WriteHeader(http.StatusSwitchingProtocols)
	rec.WriteHeader(http.StatusOK)
	assert.Equal(t, http.StatusSwitchingProtocols, rec.Status())
	assert.Equal(t, http.StatusSwitchingProtocols, hr.Code)
}

func TestRecorderHeaderSnapshot(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Before", "1")
				w.Header().Add("X-Multi", "a")
				w.Header().Add("X-Multi", "b")
				w.WriteHeader(http.StatusAccepted)
				w.Header().Set("X-Before", "changed")
				w.Header().Set("X-After", "2")
				w.Header().Add("X-Multi", "c")
				_, _ = io.WriteString(w, "x")
			})
			snap := res.rec.HeaderSnapshot()
			assert.Equal(t, "1", snap.Get("X-Before"))
			assert.Equal(t, []string{"a", "b"}, snap.Values("X-Multi"))
			assert.Empty(t, snap.Values("X-After"))
			// The client saw the same headers as the snapshot.
			assert.Equal(t, "1", res.resp.Header.Get("X-Before"))
			assert.Equal(t, []string{"a", "b"}, res.resp.Header.Values("X-Multi"))
			assert.Empty(t, res.resp.Header.Values("X-After"))
		})
	}
}

// TestRecorderReleasedSnapshotIsReused: a snapshot's memory, once
// released, serves later snapshots, each of which holds exactly the header
// it was taken of (as Header.Clone gives it: a name with nil values stays
// nil, one with an empty non-nil list stays empty and non-nil), and the
// released Recorder no longer shows its own.
func TestRecorderReleasedSnapshotIsReused(t *testing.T) {
	headers := []http.Header{
		{"X-Nil": nil, "X-Empty": {}}, // first, while the pool's value array is still nil
		{"X-First": {"1", "2"}, "X-Gone": {"g"}, "Content-Type": {"text/plain"}},
		{"X-Second": {"3"}, "X-Nil": nil, "X-Empty": {}},
		{},
		{"X-Fourth": {"4"}},
	}
	for round := range 3 {
		for i, h := range headers {
			w := httptest.NewRecorder()
			for name, values := range h {
				w.Header()[name] = values
			}
			rec := NewRecorder(w, 100)
			rec.WriteHeader(http.StatusOK)
			snap := rec.HeaderSnapshot()
			require.Equal(t, h.Clone(), snap, "round %d, header %d", round, i)
			if _, ok := h["X-Nil"]; ok {
				require.Nil(t, snap["X-Nil"])
				require.NotNil(t, snap["X-Empty"])
			}
			for name := range h {
				w.Header()[name] = []string{"changed after the status"}
			}
			require.Equal(t, h.Clone(), snap, "round %d, header %d, changed after the status", round, i)
			snap["X-Added-By-The-Caller"] = []string{"x"} // the caller may change it
			rec.Release()
			require.Nil(t, rec.HeaderSnapshot(), "released")
			rec.Release() // a second release does nothing
		}
	}
}

// TestRecorderReleasedBodyIsReused: the memory of a released body copy
// serves later Recorders, each of which keeps exactly the bytes written to
// it; a body over the limit hands its memory back at once and keeps none.
func TestRecorderReleasedBodyIsReused(t *testing.T) {
	bodies := []string{strings.Repeat("a", 300), "b", "", strings.Repeat("c", 101), strings.Repeat("d", 100)}
	for round := range 3 {
		for i, body := range bodies {
			rec := NewRecorder(httptest.NewRecorder(), 100)
			for chunk := range slices.Values(strings.SplitAfter(body, "a")) {
				_, _ = io.WriteString(rec, chunk)
			}
			if len(body) > 100 {
				require.True(t, rec.Overflowed())
				require.Nil(t, rec.Body(), "round %d, body %d", round, i)
			} else {
				require.Equal(t, body, string(rec.Body()), "round %d, body %d", round, i)
			}
			rec.Release()
			require.Nil(t, rec.Body(), "released")
		}
	}
}

func TestRecorderNothingWritten(t *testing.T) {
	for name, do := range targets {
		t.Run(name, func(t *testing.T) {
			res := do(t, 100, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Unsent", "1")
			})
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Empty(t, res.body)
			assert.Zero(t, res.rec.Status())
			assert.Nil(t, res.rec.HeaderSnapshot())
			assert.Nil(t, res.rec.Body())
			assert.Zero(t, res.rec.Written())
			assert.False(t, res.rec.Overflowed())
			assert.True(t, res.rec.Replayable())
		})
	}
}

func TestRecorderUnwrapReachesDeadline(t *testing.T) {
	res := viaServer(t, 100, func(w http.ResponseWriter, _ *http.Request) {
		rc := http.NewResponseController(w)
		assert.NoError(t, rc.SetWriteDeadline(time.Now().Add(time.Minute)))
		assert.NoError(t, rc.SetReadDeadline(time.Now().Add(time.Minute)))
		assert.NoError(t, rc.EnableFullDuplex())
		_, _ = io.WriteString(w, "ok")
	})
	assert.Equal(t, "ok", string(res.body))
	assert.Equal(t, http.StatusOK, res.rec.Status())
	assert.NotNil(t, res.rec.Unwrap())
}

func TestRecorderLimit(t *testing.T) {
	cases := []struct {
		name       string
		limit      int
		writes     []string
		overflowed bool
	}{
		{"within", 6, []string{"abc", "def"}, false},
		{"one over", 5, []string{"abc", "def"}, true},
		{"zero limit, empty writes", 0, []string{"", ""}, false},
		{"zero limit, one byte", 0, []string{"", "a"}, true},
		{"negative limit", -1, []string{"a"}, true},
		{"overflow then more", 2, []string{"abc", "d"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hr := httptest.NewRecorder()
			rec := NewRecorder(hr, tc.limit)
			var all string
			for _, s := range tc.writes {
				n, err := io.WriteString(rec, s)
				require.NoError(t, err)
				require.Equal(t, len(s), n)
				all += s
			}
			assert.Equal(t, all, hr.Body.String())
			assert.Equal(t, int64(len(all)), rec.Written())
			assert.Equal(t, tc.overflowed, rec.Overflowed())
			assert.Equal(t, !tc.overflowed, rec.Replayable())
			if tc.overflowed {
				assert.Nil(t, rec.Body())
			} else {
				assert.Equal(t, all, string(rec.Body()))
			}
		})
	}
}

func TestRecorderInvalidCodePanicsLikeNetHTTP(t *testing.T) {
	hr := httptest.NewRecorder()
	rec := NewRecorder(hr, 100)
	assert.Panics(t, func() { rec.WriteHeader(42) })
	assert.Zero(t, rec.Status())
	assert.Nil(t, rec.HeaderSnapshot())
}

// discardWriter is a reusable ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

func BenchmarkRecorder(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"v"}`), 1024/9)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		rec := NewRecorder(w, 1<<20)
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(http.StatusCreated)
		_, _ = rec.Write(body)
		if !rec.Replayable() || len(rec.Body()) != len(body) {
			b.Fatal("body not kept")
		}
	}
}

func TestRecorderResetStartsAfresh(t *testing.T) {
	first := httptest.NewRecorder()
	rec := NewRecorder(first, 4)
	rec.WriteHeader(http.StatusCreated)
	_, _ = rec.Write([]byte("too long"))
	require.True(t, rec.Overflowed())

	second := httptest.NewRecorder()
	rec.Reset(second, 16)
	require.Zero(t, rec.Status())
	require.Nil(t, rec.HeaderSnapshot())
	require.False(t, rec.Overflowed())
	_, _ = rec.Write([]byte("fits"))
	require.Equal(t, http.StatusOK, rec.Status())
	require.Equal(t, "fits", string(rec.Body()))
	require.Equal(t, "fits", second.Body.String())
	require.Equal(t, "too long", first.Body.String())
}

// failingWriter takes the status, then at most accept bytes of body, and
// fails every write after them, as a connection whose client hung up does.
type failingWriter struct {
	*httptest.ResponseRecorder
	accept int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	n := min(len(p), f.accept)
	f.accept -= n
	_, _ = f.ResponseRecorder.Write(p[:n])
	if n < len(p) {
		return n, errors.New("connection reset by peer")
	}
	return n, nil
}

// TestRecorderCutShort: a body write that fails or is short makes the
// response not replayable; a body refused for a 204 does not.
func TestRecorderCutShort(t *testing.T) {
	w := &failingWriter{ResponseRecorder: httptest.NewRecorder(), accept: 5}
	rec := NewRecorder(w, 1<<20)
	rec.WriteHeader(http.StatusCreated)
	_, err := rec.Write([]byte("paid in full"))
	require.Error(t, err)
	require.True(t, rec.CutShort())
	require.False(t, rec.Replayable())
	require.Equal(t, "paid ", string(rec.Body()), "the body kept is what the client was sent")

	empty := NewRecorder(httptest.NewRecorder(), 1<<20)
	empty.WriteHeader(http.StatusNoContent)
	_, err = empty.Write([]byte("no body for a 204"))
	require.ErrorIs(t, err, http.ErrBodyNotAllowed)
	require.False(t, empty.CutShort())
	require.True(t, empty.Replayable())
}

// TestRecorderForHead: the response to a HEAD request is never cut short,
// whatever its writer says of the body, which its client never gets.
func TestRecorderForHead(t *testing.T) {
	w := &failingWriter{ResponseRecorder: httptest.NewRecorder(), accept: 0}
	rec := NewRecorder(w, 1<<20)
	rec.ForHead()
	_, err := rec.Write([]byte("body of a HEAD response"))
	require.Error(t, err)
	require.False(t, rec.CutShort())
	require.True(t, rec.Replayable())
}

// TestRecorderBodyShortOfItsLength: a body shorter than the Content-Length
// the handler declared is not replayable (net/http ends the connection
// instead of the response); one of that length is, and so is the response
// to a HEAD request, or a 204, which has no body to measure.
func TestRecorderBodyShortOfItsLength(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		length     string
		body       string
		head       bool
		replayable bool
	}{
		{"short", http.StatusCreated, "10", "hello", false, false},
		{"whole", http.StatusCreated, "5", "hello", false, true},
		{"HEAD", http.StatusOK, "10", "", true, true},
		{"204", http.StatusNoContent, "10", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := NewRecorder(httptest.NewRecorder(), 100)
			if tc.head {
				rec.ForHead()
			}
			rec.Header().Set("Content-Length", tc.length)
			rec.WriteHeader(tc.status)
			_, _ = io.WriteString(rec, tc.body)
			require.Equal(t, tc.replayable, rec.Replayable())
			rec.Release()
		})
	}
}

// TestRecorderBodyStaysValidPastAnOverflow: a Body taken before the body
// overflowed the limit stays as it was until Release: the overflow does
// not hand its buffer to the next Recorder. (Fifty tries: the race
// detector drops some of what the pool is given.)
func TestRecorderBodyStaysValidPastAnOverflow(t *testing.T) {
	for try := range 50 {
		rec := NewRecorder(httptest.NewRecorder(), 10)
		_, _ = io.WriteString(rec, "paid")
		kept := rec.Body()
		_, _ = io.WriteString(rec, strings.Repeat("x", 20))
		require.Nil(t, rec.Body(), "overflowed")
		next := NewRecorder(httptest.NewRecorder(), 10)
		_, _ = io.WriteString(next, "evil")
		require.Equal(t, "paid", string(kept), "try %d", try)
		next.Release()
		rec.Release()
	}
}
