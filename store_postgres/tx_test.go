package pgstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestTxEmptyTokenIsRefused: BeginClaim under an empty token fails with
// store.ErrEmptyToken, opens no transaction and leaves the key free.
func TestTxEmptyTokenIsRefused(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	_, _, tx, err := s.BeginClaim(context.Background(), "k", "fp", "")
	require.ErrorIs(t, err, store.ErrEmptyToken)
	require.Nil(t, tx)
	mustBeginClaim(t, s, "k", "fp", "pay-1")
}

func TestTxCommitMakesWritesAndRecordVisibleTogether(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	ctx := context.Background()
	rec, tx := mustBeginClaim(t, s, "k", "fp", "pay_1")
	assert.Equal(t, store.StateInFlight, rec.State)
	assert.Equal(t, store.Lease{Token: "token-pay_1", Fence: 1}, rec.Owner)

	assert.Empty(t, s.ledgerRows(t), "the handler's write is not visible before the commit")
	assert.Zero(t, s.rows(t, "k"), "the claim is not visible before the commit")

	resp := &store.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)}
	require.NoError(t, tx.Commit(ctx, resp, time.Hour))
	assert.Equal(t, []string{"pay_1"}, s.ledgerRows(t))
	require.NoError(t, tx.Rollback(ctx), "rollback after commit is a no-op")

	_, got, again, err := s.BeginClaim(ctx, "k", "fp", "other")
	require.NoError(t, err)
	assert.Nil(t, again, "a committed key is not claimed again")
	assert.Equal(t, store.StateCompleted, got.State)
	assert.Equal(t, "fp", got.Fingerprint)
	assert.Equal(t, resp, got.Response)
	assert.InDelta(t, time.Hour, got.TTL, float64(time.Minute))

	plain, claimed, err := s.Claim(ctx, "k", "fp", "plain", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, resp, plain.Response, "a plain claim sees the committed record too")
}

func TestTxRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	ctx := context.Background()
	_, tx := mustBeginClaim(t, s, "k", "fp", "pay_1")
	require.NoError(t, tx.Rollback(ctx))
	assert.Empty(t, s.ledgerRows(t))
	assert.Zero(t, s.rows(t, "k"))

	rec, tx := mustBeginClaim(t, s, "k", "fp", "pay_2")
	assert.Equal(t, int64(1), rec.Owner.Fence, "the key is claimed afresh")
	require.NoError(t, tx.Commit(ctx, nil, time.Hour))
	assert.Equal(t, []string{"pay_2"}, s.ledgerRows(t))
	got, claimed, err := s.Claim(ctx, "k", "fp", "plain", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateUnreplayable, got.State, "a nil response commits done but not replayable")
}

// assertHeldByOpenTx checks that a transactional and a plain claim of key
// under fingerprint both report it in flight at once, as a key an open
// transaction holds: in flight, TTL 0, and the caller's fingerprint. A
// context deadline proves neither waited for the holder.
func assertHeldByOpenTx(t *testing.T, s *TxStore, key, fingerprint string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, rec, second, err := s.BeginClaim(ctx, key, fingerprint, "second")
	require.NoError(t, err, "a transactional claim waited for the holder")
	assert.Nil(t, second)
	assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, rec,
		"in flight, TTL 0, and the caller's fingerprint: the holder's row is not visible")

	rec, claimed, err := s.Claim(ctx, key, fingerprint, "plain", time.Minute)
	require.NoError(t, err, "a plain claim waited for the holder")
	assert.False(t, claimed)
	assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, rec)
}

// TestTxHeldKeyIsNotWaitedFor: while a transaction holds a key, every
// other claim of it (transactional or plain, same fingerprint or not)
// reports it in flight at once. A context deadline proves none waited: the
// holder's transaction stays open until after they all returned.
func TestTxHeldKeyIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	_, tx := mustBeginClaim(t, s, "k", "fp", "pay_1")
	defer func() { require.NoError(t, tx.Rollback(context.Background())) }()

	for _, fp := range []string{"fp", "other"} {
		assertHeldByOpenTx(t, s, "k", fp)
	}
	assert.Zero(t, s.rows(t, "k"))
}

// TestTxTakeoverIsNotWaitedFor: a transaction that takes over a plain
// claim's expired lease has updated (and locked) the committed row; other
// claims and the sweeper neither wait for it nor change the row.
func TestTxTakeoverIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	old := mustClaim(t, s.Store, "k", "old", "old-owner", time.Microsecond)
	rec, tx := mustBeginClaim(t, s, "k", "fp", "pay_1")
	assert.Equal(t, old.Owner.Fence+1, rec.Owner.Fence, "a takeover raises the fence")

	assertHeldByOpenTx(t, s, "k", "fp")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "the sweeper skips the row being taken over")

	require.NoError(t, tx.Commit(ctx, &store.Response{Status: 201}, time.Hour))
	assert.ErrorIs(t, s.Complete(ctx, "k", old.Owner, nil, time.Hour), store.ErrNotOwner)
	got, _, err := s.Claim(ctx, "k", "fp", "plain", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, store.StateCompleted, got.State)
	assert.Equal(t, []string{"pay_1"}, s.ledgerRows(t))
}

// TestTxPlainClaimHoldsOff: a key claimed by a plain Store is in flight
// for BeginClaim, which sees the plain claim's committed record.
func TestTxPlainClaimHoldsOff(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	mustClaim(t, s.Store, "k", "plain-fp", "plain", time.Minute)
	_, rec, tx, err := s.BeginClaim(context.Background(), "k", "fp", "tx")
	require.NoError(t, err)
	assert.Nil(t, tx)
	assert.Equal(t, store.StateInFlight, rec.State)
	assert.Equal(t, "plain-fp", rec.Fingerprint, "a committed in-flight record is shown as it is")
	assert.Positive(t, rec.TTL)
}

// TestTxRaceOneWinner: many transactional claims and some plain ones race
// on one key, a fresh one and then an expired one, round after round;
// exactly one of them wins, and every other reports the key in flight.
func TestTxRaceOneWinner(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	const txClaims, plainClaims = 12, 4
	for round := range 20 {
		key := fmt.Sprintf("race-%d", round)
		if round%2 == 1 {
			mustClaim(t, s.Store, key, "old", "old-owner", time.Microsecond)
		}
		var (
			mu      sync.Mutex
			winners []store.Tx
			plain   int
		)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		storetest.Together(txClaims+plainClaims, func(i int) {
			token := fmt.Sprintf("token-%d", i)
			if i < plainClaims {
				rec, claimed, err := s.Claim(ctx, key, "fp", token, time.Minute)
				assert.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				if claimed {
					plain++
				} else {
					assert.Equal(t, store.StateInFlight, rec.State)
				}
				return
			}
			_, rec, tx, err := s.BeginClaim(ctx, key, "fp", token)
			assert.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			if tx != nil {
				winners = append(winners, tx)
			} else {
				assert.Equal(t, store.StateInFlight, rec.State)
			}
		})
		cancel()
		require.Equal(t, 1, len(winners)+plain, "round %d: %d transactions and %d plain claims won", round, len(winners), plain)
		for _, tx := range winners {
			require.NoError(t, tx.Commit(context.Background(), nil, time.Hour))
		}
	}
}

// TestTxFailedHandlerStatementCommitsNothing: a statement of the handler
// that fails aborts the transaction, so Commit fails, and neither the
// handler's earlier writes nor the record are kept.
func TestTxFailedHandlerStatementCommitsNothing(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	ctx := context.Background()
	txCtx, _, tx, err := s.BeginClaim(ctx, "k", "fp", "token")
	require.NoError(t, err)
	require.NotNil(t, tx)
	require.NoError(t, s.writeLedger(txCtx, "pay_1"))
	require.Error(t, s.writeLedger(txCtx, "pay_1"), "a duplicate id")

	require.Error(t, tx.Commit(ctx, &store.Response{Status: 201}, time.Hour))
	require.NoError(t, tx.Rollback(ctx))
	assert.Empty(t, s.ledgerRows(t))
	assert.Zero(t, s.rows(t, "k"))
	_, tx = mustBeginClaim(t, s, "k", "fp", "pay_2")
	require.NoError(t, tx.Commit(ctx, nil, time.Hour), "the key is free again")
}

func TestTxAccessor(t *testing.T) {
	t.Parallel()
	tx, ok := Tx(context.Background())
	assert.False(t, ok)
	assert.Nil(t, tx)

	s := newTestTxStore(t)
	ctx := context.Background()
	txCtx, _, claim, err := s.BeginClaim(ctx, "k", "fp", "token")
	require.NoError(t, err)
	handlerTx, ok := Tx(txCtx)
	require.True(t, ok)
	assert.ErrorIs(t, handlerTx.Commit(ctx), ErrTxOwned)
	assert.ErrorIs(t, handlerTx.Rollback(ctx), ErrTxOwned)
	require.NoError(t, s.writeLedger(txCtx, "pay_1"), "the transaction is still open")
	assert.Empty(t, s.ledgerRows(t), "and was not committed")

	// A savepoint undoes part of the handler's writes.
	sp, err := handlerTx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ('pay_2')`)
	require.NoError(t, err)
	require.NoError(t, sp.Rollback(ctx))

	require.NoError(t, claim.Commit(ctx, &store.Response{Status: 422}, time.Hour))
	assert.Equal(t, []string{"pay_1"}, s.ledgerRows(t))
}

// countingTxStore counts BeginClaim calls.
type countingTxStore struct {
	*TxStore
	begins atomic.Int64
}

func (s *countingTxStore) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, store.Record, store.Tx, error) {
	s.begins.Add(1)
	return s.TxStore.BeginClaim(ctx, key, fingerprint, token)
}

// txFixture is a transactional store with its ledger (newTestTxStore),
// reached through a pool of four connections of its own, and a handler
// that writes the request's key to the ledger through the request's
// transaction, then, once release is closed, answers 503 to a request with
// an X-Fail header and 201 to any other.
type txFixture struct {
	store   *countingTxStore
	entered chan struct{}
	release chan struct{}
}

func newTxFixture(t *testing.T) *txFixture {
	p := ownPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
	return &txFixture{
		store:   &countingTxStore{TxStore: newTestTxStoreOn(t, p)},
		entered: make(chan struct{}, 10),
		release: make(chan struct{}),
	}
}

func (f *txFixture) handler(opts ...idempotency.Option) http.Handler {
	opts = append([]idempotency.Option{idempotency.WithStore(f.store)}, opts...)
	return idempotency.New(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f.store.writeLedger(r.Context(), r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.entered <- struct{}{}
		<-f.release
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
}

// TestTxMiddlewareWaitThenReplay: with WithWait, a duplicate that arrives
// while the first request's transaction is open polls (each poll a
// BeginClaim that reports the key in flight) until the commit, then gets
// the replay; the handler ran once and its row was committed once.
func TestTxMiddlewareWaitThenReplay(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t)
	h := f.handler(idempotency.WithWait(time.Minute))
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- sendTo(h, "k", nil) }()
	<-f.entered
	dup := make(chan *httptest.ResponseRecorder)
	go func() { dup <- sendTo(h, "k", nil) }()
	require.Eventually(t, func() bool { return f.store.begins.Load() >= 3 }, time.Minute, 5*time.Millisecond,
		"the duplicate polled the key in flight")
	assert.Empty(t, f.store.ledgerRows(t), "nothing is committed while the handler runs")
	close(f.release)

	w := <-first
	require.Equal(t, http.StatusCreated, w.Code)
	d := <-dup
	assert.Equal(t, http.StatusCreated, d.Code)
	assert.Equal(t, "true", d.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, w.Body.String(), d.Body.String())
	assert.Equal(t, []string{"k"}, f.store.ledgerRows(t))
}

// TestTxMiddleware5xxRollsBack: a 5xx is sent as written, and the
// handler's row is rolled back with the claim, so the retry runs afresh
// and its row is the only one.
func TestTxMiddleware5xxRollsBack(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t)
	close(f.release)
	h := f.handler()
	w := sendTo(h, "k", http.Header{"X-Fail": {"1"}})
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Empty(t, f.store.ledgerRows(t), "the 5xx's row was rolled back")

	w = sendTo(h, "k", nil)
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Empty(t, w.Header().Get("Idempotent-Replayed"), "the retry ran afresh")
	assert.Equal(t, []string{"k"}, f.store.ledgerRows(t))
}

// TestTxRoundTripsPerRequest counts, through the real middleware, what the
// transactional mode asks of Postgres: a first request costs BEGIN, the
// claim, the complete and COMMIT, the plain store's two plus BEGIN and
// COMMIT; a request that claims nothing costs BEGIN, the claim and
// ROLLBACK. The handler's own INSERT, one statement and one round trip, is
// counted in the first request's figure.
func TestTxRoundTripsPerRequest(t *testing.T) {
	// Two connections: one held by a request in flight, one for its
	// duplicate.
	rt := &roundTrips{}
	s := newTestTxStoreOn(t, countedPool(t, rt, 2))
	write := func(r *http.Request) error {
		return s.writeLedger(r.Context(), r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
	}
	requireCosts(t, rt, s, write, 2, requestCosts{
		first:    cost{5, "BEGIN, claim, the handler's INSERT, complete, COMMIT"},
		replay:   cost{3, "BEGIN, claim, ROLLBACK"},
		reused:   cost{3, "BEGIN, claim, ROLLBACK"},
		conflict: cost{3, "BEGIN, claim, ROLLBACK"},
	})
}
