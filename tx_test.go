package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// txMemory is a store.TxStore over the memory store for testing the
// middleware's transactional path: a transaction stages ledger entries
// that become visible only on Commit. The Postgres store's own tests run
// the same path against a real database.
type txMemory struct {
	*store.Memory
	mu           sync.Mutex
	ledger       []string
	failCommit   atomic.Bool
	beforeCommit func() // if set, called as Commit starts
}

type stagedKey struct{}

type memTx struct {
	s      *txMemory
	key    string
	owner  store.Lease
	staged []string
}

func (s *txMemory) BeginClaim(ctx context.Context, key, fp, token string) (context.Context, store.Record, store.Tx, error) {
	rec, claimed, err := s.Claim(ctx, key, fp, token, time.Minute)
	if err != nil || !claimed {
		return ctx, rec, nil, err
	}
	tx := &memTx{s: s, key: key, owner: rec.Owner}
	return context.WithValue(ctx, stagedKey{}, tx), rec, tx, nil
}

func (tx *memTx) Commit(ctx context.Context, resp *store.Response, retention time.Duration) error {
	if tx.s.beforeCommit != nil {
		tx.s.beforeCommit()
	}
	if tx.s.failCommit.Load() {
		_ = tx.Rollback(ctx)
		return errors.New("commit failed: connection reset")
	}
	if err := tx.s.Complete(ctx, tx.key, tx.owner, resp, retention); err != nil {
		return err
	}
	tx.s.mu.Lock()
	defer tx.s.mu.Unlock()
	tx.s.ledger = append(tx.s.ledger, tx.staged...)
	return nil
}

func (tx *memTx) Rollback(ctx context.Context) error {
	err := tx.s.Release(ctx, tx.key, tx.owner)
	if errors.Is(err, store.ErrNotOwner) {
		return nil
	}
	return err
}

func (s *txMemory) committed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ledger...)
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
