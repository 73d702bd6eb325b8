package idempotency_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

// paymentHandler is a handler under test: it counts its runs, echoes the
// request body, and sets headers that are and are not replayable.
type paymentHandler struct {
	runs   atomic.Int64
	status int
	delay  time.Duration
	gate   chan struct{} // if set, every run waits until it is closed
}

func (h *paymentHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	if h.delay > 0 {
		time.Sleep(h.delay)
	}
	if h.gate != nil {
		<-h.gate
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Run", string(rune('0'+n%10)))
	status := h.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// serve and post send one request through a handler and return its
// response (idempotencytest.Serve, idempotencytest.Post).
var serve, post = idempotencytest.Serve, idempotencytest.Post

func postTo(t *testing.T, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// requireProblem checks that resp is a problem+json response of the given
// status and type.
func requireProblem(t *testing.T, resp *http.Response, status int, problemType string) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, readAll(t, resp), `"type":"`+problemType+`"`)
}

// withDeadline gives every request a deadline, as a per-request timeout
// middleware or a gateway's budget does: the context ends while the client
// is still connected and waiting for an answer.
func withDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// flakyStore is a memory store that can be taken down: while down, every
// call fails with errStoreDown, as an unreachable Redis or Postgres would.
type flakyStore struct {
	store.Store
	down atomic.Bool
}

var errStoreDown = errors.New("dial tcp 10.0.0.1:6379: connection refused (internal detail)")

func newFlakyStore() *flakyStore { return &flakyStore{Store: store.NewMemory()} }

func (s *flakyStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if s.down.Load() {
		return store.Record{}, false, errStoreDown
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *flakyStore) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

func (s *flakyStore) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Complete(ctx, key, owner, resp, retention)
}

func (s *flakyStore) Release(ctx context.Context, key string, owner store.Lease) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Release(ctx, key, owner)
}

// claimFailingStore answers its first claims (answered of them) as its
// store does and fails every later one with fail: the polls of a request
// waiting on a key, say, or with answered 0, every claim.
type claimFailingStore struct {
	store.Store
	claims   atomic.Int64
	answered int64
	fail     func(ctx context.Context) error
}

func (s *claimFailingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if s.claims.Add(1) > s.answered {
		return store.Record{}, false, s.fail(ctx)
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

// stall answers only when its caller gives up, as a store that has stopped
// responding does.
func stall(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// errorLog collects what the middleware reports to its error handler.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) option() idempotency.Option {
	return idempotency.WithErrorHandler(func(_ *http.Request, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.errs = append(l.errs, err)
	})
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// postWithin sends a request through mw as post does, but fails the test
// if no answer comes within d: a duplicate that wrongly ran a handler
// waiting on its gate would otherwise hang the test until its timeout.
func postWithin(t *testing.T, d time.Duration, mw http.Handler, key, body string) *http.Response {
	t.Helper()
	answer := make(chan *http.Response, 1)
	go func() { answer <- post(mw, key, body) }()
	select {
	case resp := <-answer:
		return resp
	case <-time.After(d):
		require.FailNow(t, "no answer", "the request for key %q got no answer within %v", key, d)
		return nil
	}
}

// startFirst sends a first request through mw in the background and waits
// until h is running it. The returned channel closes when it has finished.
func startFirst(t *testing.T, mw http.Handler, h *paymentHandler, key, body string) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(mw, key, body)
	}()
	require.Eventually(t, func() bool { return h.runs.Load() >= 1 }, time.Second, time.Millisecond)
	return done
}

// txMemory is a store.TxStore over the memory store for testing the
// middleware's transactional path: a transaction stages ledger entries
// that become visible only on Commit. The Postgres store's own tests run
// bothModes returns, by name, a memory store and a transactional one over
// another, for a test that runs in both modes.
func bothModes() map[string]store.Store {
	return map[string]store.Store{"plain": store.NewMemory(), "transactional": &txMemory{Memory: store.NewMemory()}}
}

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
