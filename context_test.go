package idempotency_test

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// keySpy is a handler that keeps what FromContext told each of its runs
// and answers 201.
type keySpy struct {
	mu   sync.Mutex
	seen []seenKey
}

type seenKey struct {
	key    idempotency.Key
	ok     bool
	charge string // key.Derive("charge")
}

func (s *keySpy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k, ok := idempotency.FromContext(r.Context())
	s.mu.Lock()
	s.seen = append(s.seen, seenKey{key: k, ok: ok, charge: k.Derive("charge")})
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (s *keySpy) last(t *testing.T) seenKey {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.seen, "the handler did not run")
	return s.seen[len(s.seen)-1]
}

// urlSafe256 is what Derive returns: a SHA-256 in unpadded URL-safe base64.
var urlSafe256 = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// TestFromContext: a handler running under a claimed key sees the client's
// key and the claim's fence, in a transaction too; every other handler
// sees nothing.
func TestFromContext(t *testing.T) {
	for name, st := range bothModes() {
		t.Run("claimed, "+name, func(t *testing.T) {
			spy := &keySpy{}
			mw := idempotency.New(idempotency.WithStore(st))(spy)
			require.Equal(t, http.StatusCreated, post(mw, `"pay-1"`, "{}").StatusCode)
			got := spy.last(t)
			require.True(t, got.ok)
			require.Equal(t, "pay-1", got.key.Client, "the key as the client meant it, unquoted")
			require.Positive(t, got.key.Fence)
			require.Regexp(t, urlSafe256, got.charge)
		})
	}

	unclaimed := map[string]struct {
		opts []idempotency.Option
		send func(http.Handler)
	}{
		"no key":             {send: func(mw http.Handler) { post(mw, "", "{}") }},
		"method not guarded": {send: func(mw http.Handler) { serve(mw, http.MethodGet, "/payments", "k", "") }},
		"failed open": {
			opts: []idempotency.Option{idempotency.WithStore(downStore()), idempotency.WithFailOpen(),
				idempotency.WithErrorHandler(func(*http.Request, error) {}),
				idempotency.WithLogger(slog.New(slog.DiscardHandler))},
			send: func(mw http.Handler) { post(mw, "k", "{}") },
		},
	}
	for name, tc := range unclaimed {
		t.Run(name, func(t *testing.T) {
			spy := &keySpy{}
			tc.send(idempotency.New(tc.opts...)(spy))
			require.Equal(t, seenKey{charge: idempotency.Key{}.Derive("charge")}, spy.last(t))
		})
	}

	t.Run("outside a request", func(t *testing.T) {
		_, ok := idempotency.FromContext(context.Background())
		require.False(t, ok)
	})
}

// downStore is a store that cannot be reached.
func downStore() *flakyStore {
	s := newFlakyStore()
	s.down.Store(true)
	return s
}

// TestFromContextAllocatesNothing: the handler may ask on every request.
func TestFromContextAllocatesNothing(t *testing.T) {
	var allocs float64
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		allocs = testing.AllocsPerRun(100, func() { _, _ = idempotency.FromContext(ctx) })
	}))
	post(mw, "k", "{}")
	require.Zero(t, allocs)
}

// TestDeriveIsStableAcrossATakeover: a request whose first run lost its
// lease (its process stalled: its renewals fail) is taken over by a retry
// with a higher fence, and the retry derives the same downstream key, so
// the downstream service sees one request, not two.
func TestDeriveIsStableAcrossATakeover(t *testing.T) {
	shared := store.NewMemory()
	stalled := &flakyStore{Store: shared}
	gate := make(chan struct{})
	first := &keySpy{}
	quiet := idempotency.WithErrorHandler(func(*http.Request, error) {})
	lease := idempotency.WithLease(100 * time.Millisecond)
	dying := idempotency.New(idempotency.WithStore(stalled), lease, quiet)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			first.ServeHTTP(w, r)
			stalled.down.Store(true) // from now on, no renewal reaches the store
			<-gate
		}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(dying, "k", "{}")
	}()
	defer func() { close(gate); <-done }()
	require.Eventually(t, func() bool {
		first.mu.Lock()
		defer first.mu.Unlock()
		return len(first.seen) == 1
	}, 5*time.Second, time.Millisecond, "the first run is under way")

	retry := &keySpy{}
	mw := idempotency.New(idempotency.WithStore(shared), lease, quiet)(retry)
	require.Eventually(t, func() bool { return post(mw, "k", "{}").StatusCode == http.StatusCreated },
		5*time.Second, 20*time.Millisecond, "the retry takes the lapsed lease over")
	before, after := first.last(t), retry.last(t)
	require.Greater(t, after.key.Fence, before.key.Fence)
	require.Equal(t, before.charge, after.charge)
}

// TestDeriveKeepsRequestsApart: another name, client key, scope or route
// derives another downstream key; the same request the same one.
func TestDeriveKeepsRequestsApart(t *testing.T) {
	spy := &keySpy{}
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	mw := idempotency.New(idempotency.WithScope(user))(spy)
	sendTo := func(mw http.Handler, target, key, scope string) seenKey {
		serve(mw, http.MethodPost, target, key, "{}", func(r *http.Request) { r.Header.Set("X-User", scope) })
		return spy.last(t)
	}
	send := func(target, key, scope string) seenKey { return sendTo(mw, target, key, scope) }
	base := send("/payments", "k", "alice")
	require.NotEqual(t, base.charge, base.key.Derive("refund"), "another name")
	seen := map[string]string{base.charge: "base"}
	for name, other := range map[string]seenKey{
		"another key":   send("/payments", "k2", "alice"),
		"another scope": send("/payments", "k", "bob"),
		"another route": send("/refunds", "k", "alice"),
	} {
		require.NotContains(t, seen, other.charge, "%s derives the key of %s", name, seen[other.charge])
		seen[other.charge] = name
	}
	// The same request run by another process (with a store of its own,
	// here) derives the same key.
	other := idempotency.New(idempotency.WithScope(user))(spy)
	require.Equal(t, base.charge, sendTo(other, "/payments", "k", "alice").charge)
}

// TestDoNotRecord: a handler that refuses its request before any side
// effect frees the key, so the client's corrected request with the same
// key runs (and is recorded) instead of getting 422; in a transaction the
// refused run's writes are rolled back.
func TestDoNotRecord(t *testing.T) {
	refusing := func(s *txMemory) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s != nil {
				tx := r.Context().Value(stagedKey{}).(*memTx)
				tx.staged = append(tx.staged, "refused")
			}
			if r.Header.Get("X-Valid") == "" {
				require.True(t, idempotency.DoNotRecord(r.Context()))
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
	}
	valid := func(r *http.Request) { r.Header.Set("X-Valid", "yes") }
	t.Run("plain", func(t *testing.T) {
		mw := idempotency.New()(refusing(nil))
		require.Equal(t, http.StatusBadRequest, post(mw, "k", `{"amount":0}`).StatusCode)
		require.Equal(t, http.StatusCreated, post(mw, "k", `{"amount":5}`, valid).StatusCode,
			"the corrected body runs under the same key")
		require.Equal(t, "true", post(mw, "k", `{"amount":5}`, valid).Header.Get("Idempotent-Replayed"))
	})
	t.Run("transactional", func(t *testing.T) {
		s := &txMemory{Memory: store.NewMemory()}
		mw := idempotency.New(idempotency.WithStore(s))(refusing(s))
		require.Equal(t, http.StatusBadRequest, post(mw, "k", `{"amount":0}`).StatusCode)
		require.Empty(t, s.committed(), "the refused run is rolled back")
		require.Equal(t, http.StatusCreated, post(mw, "k", `{"amount":5}`, valid).StatusCode)
		require.Equal(t, []string{"refused"}, s.committed(), "only the corrected run commits")
	})
	t.Run("outside a claimed request", func(t *testing.T) {
		require.False(t, idempotency.DoNotRecord(context.Background()))
	})
}
