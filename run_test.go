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
	"github.com/seed43327c4c/idempotency/store"
)

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

// TestPanic: a handler that panics has its key released and its panic
// raised again.
func TestPanic(t *testing.T) {
	t.Run("releases the key and is re-raised", func(t *testing.T) {
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
	})

	// TestPanicAfterASuccessReleasesTheKey: a handler that wrote 201 and then
	// panicked is released too (SPEC §4: a panic releases), not recorded: its
	// response was cut short, and the retry runs it again.
	t.Run("after a success releases the key", func(t *testing.T) {
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
	})
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

// TestUnstorableResponseIsNotReplayable: a response the middleware cannot
// store whole reaches its client and leaves its key done but not replayable.
func TestUnstorableResponseIsNotReplayable(t *testing.T) {
	t.Run("oversized", func(t *testing.T) {
		big := make([]byte, 64<<10)
		_, _ = rand.Read(big)
		got := notReplayable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.Copy(w, bytes.NewReader(big))
		}), idempotency.WithMaxResponseBytes(1024))
		require.Equal(t, big, got, "the client got the whole body")
	})

	t.Run("flushed", func(t *testing.T) {
		got := notReplayable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "part one,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part two")
		}))
		require.Equal(t, "part one,part two", string(got))
	})

	t.Run("hijacked", func(t *testing.T) {
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
	})
}

// TestIOCopy: a handler that answers with io.Copy, which takes the
// writer's ReadFrom.
func TestIOCopy(t *testing.T) {
	t.Run("after WriteHeader is replayed byte for byte", func(t *testing.T) {
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
	})

	// TestIOCopyFromAFailingSourceReleasesTheKey: a handler whose io.Copy
	// fails before its first byte may still answer 502, as without the
	// middleware; the 502 releases the key and the retry runs the handler again.
	t.Run("from a failing source releases the key", func(t *testing.T) {
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
	})
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

func (c cancelOnRead) Read(p []byte) (int, error) {
	c.cancel()
	return c.ReadCloser.Read(p)
}

func (s contextStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, false, err
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s contextStore) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

func (s contextStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

func (s contextStore) Release(ctx context.Context, key string, owner store.Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, owner)
}

// ledgerHandler stages one ledger entry in the request's transaction, then
// answers with status.
func ledgerHandler(status *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := r.Context().Value(stagedKey{}).(*memTx)
		tx.staged = append(tx.staged, "payment")
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"id":1}`))
	})
}

func TestTxCommitsTheHandlerWritesWithTheRecord(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	var status atomic.Int64
	status.Store(http.StatusCreated)
	mw := idempotency.New(idempotency.WithStore(s))(ledgerHandler(&status))
	first := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "/payments/1", first.Header.Get("Location"))
	require.Equal(t, `{"id":1}`, readAll(t, first))
	dup := post(mw, "k", "{}")
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
	require.Equal(t, `{"id":1}`, readAll(t, dup))
	require.Equal(t, []string{"payment"}, s.committed())
}

func TestTxRollsBackOn5xxAndPanic(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	var status atomic.Int64
	status.Store(http.StatusInternalServerError)
	mw := idempotency.New(idempotency.WithStore(s))(ledgerHandler(&status))
	require.Equal(t, http.StatusInternalServerError, post(mw, "k", "{}").StatusCode, "the 5xx is sent as written")
	require.Empty(t, s.committed())

	panicking := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ledgerHandler(&status).ServeHTTP(httptest.NewRecorder(), r)
		panic("boom")
	}))
	require.PanicsWithValue(t, "boom", func() { post(panicking, "k", "{}") })
	require.Empty(t, s.committed())

	status.Store(http.StatusCreated)
	require.Empty(t, post(mw, "k", "{}").Header.Get("Idempotent-Replayed"), "the key is free again")
	require.Equal(t, []string{"payment"}, s.committed())
}

func TestTxFailedCommitSends503AndNothing(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	errs := &errorLog{}
	var status atomic.Int64
	status.Store(http.StatusCreated)
	mw := idempotency.New(idempotency.WithStore(s), errs.option())(ledgerHandler(&status))
	s.failCommit.Store(true)
	resp := post(mw, "k", "{}")
	require.Empty(t, resp.Header.Get("Location"), "none of the handler's response leaks")
	requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable)
	require.Empty(t, s.committed())
	require.Len(t, errs.all(), 1)

	s.failCommit.Store(false)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	require.Equal(t, []string{"payment"}, s.committed())
}

func TestTxHoldsTheResponseUntilCommitted(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/payments/1")
		_, _ = w.Write([]byte("part one,"))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("part two"))
	})
	mw := idempotency.New(idempotency.WithStore(s))(h)
	client := httptest.NewRecorder()
	var sentBeforeCommit string
	var committing, flushedBeforeCommit bool
	s.beforeCommit = func() {
		committing = true
		sentBeforeCommit = client.Body.String() + client.Header().Get("Location")
		flushedBeforeCommit = client.Flushed
	}
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	mw.ServeHTTP(client, req)
	require.True(t, committing, "the request ran in a transaction")
	require.Empty(t, sentBeforeCommit, "nothing reaches the client before the commit")
	require.False(t, flushedBeforeCommit)
	require.Equal(t, "part one,part two", client.Body.String())
	require.Equal(t, "/payments/1", client.Header().Get("Location"))
}

// txServer serves h behind the middleware on a transactional store of its
// own, until the test ends.
func txServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(idempotency.New(idempotency.WithStore(&txMemory{Memory: store.NewMemory()}))(h))
	t.Cleanup(srv.Close)
	return srv
}

// TestTxSendsTheHeadersSetBeforeTheStatus: as with net/http's own writer,
// headers changed after WriteHeader are neither sent nor stored in the
// transactional mode either, Set-Cookie included.
func TestTxSendsTheHeadersSetBeforeTheStatus(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("paid"))
		w.Header().Set("Set-Cookie", "late=1")
		w.Header().Set("Location", "/payments/late")
	})
	srv := txServer(t, h)
	for i := range 2 {
		resp := postTo(t, srv.URL, "k", "{}")
		require.Equal(t, http.StatusCreated, resp.StatusCode, "response %d", i)
		require.Equal(t, i == 1, resp.Header.Get("Idempotent-Replayed") == "true", "response %d", i)
		require.Equal(t, "/payments/1", resp.Header.Get("Location"), "response %d", i)
		require.Empty(t, resp.Header.Values("Set-Cookie"), "response %d", i)
	}
}

// TestTxTrailersAreSentAfterTheBody: a held response's declared trailer
// reaches the client as a trailer, not as a header, and the response, like
// any with trailers, is not replayable.
func TestTxTrailersAreSentAfterTheBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("paid"))
		w.Header().Set("X-Checksum", "abc123")
	})
	srv := txServer(t, h)
	first := postTo(t, srv.URL, "k", "{}")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Empty(t, first.Header.Values("X-Checksum"), "sent as a header")
	require.Equal(t, "paid", readAll(t, first))
	require.Equal(t, "abc123", first.Trailer.Get("X-Checksum"))
	requireProblem(t, postTo(t, srv.URL, "k", "{}"), http.StatusConflict, idempotency.ProblemNotReplayable)
}

func TestTxFlushedResponseStaysReplayable(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("part one,"))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("part two"))
	})
	srv := txServer(t, h)
	require.Equal(t, "part one,part two", readAll(t, postTo(t, srv.URL, "k", "{}")))
	dup := postTo(t, srv.URL, "k", "{}")
	require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"), "a flush inside a transaction is held, so it stays replayable")
	require.Equal(t, "part one,part two", readAll(t, dup))
}

// TestTxOversizedResponseIsNotReplayable: in transactional mode too, a
// response over WithMaxResponseBytes reaches the client in full and the
// handler's writes are committed, but the key is marked done but not
// replayable: a duplicate gets 409 not-replayable and the handler does not
// run again.
func TestTxOversizedResponseIsNotReplayable(t *testing.T) {
	s := &txMemory{Memory: store.NewMemory()}
	var status atomic.Int64
	status.Store(http.StatusCreated)
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithMaxResponseBytes(4))(ledgerHandler(&status))
	first := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "/payments/1", first.Header.Get("Location"))
	require.Equal(t, `{"id":1}`, readAll(t, first), "the whole body, over the limit, is sent")
	require.Equal(t, []string{"payment"}, s.committed())

	dup := post(mw, "k", "{}")
	requireProblem(t, dup, http.StatusConflict, idempotency.ProblemNotReplayable)
	require.Equal(t, []string{"payment"}, s.committed(), "the handler did not run again")
}
