package pgstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestConcurrentCallsShareBatches: while both lanes of new claims are
// held, the claims arriving meanwhile go out together, and each call's
// outcome is its own.
func TestConcurrentCallsShareBatches(t *testing.T) {
	const n = 64
	tracer := &heldLanes{release: make(chan struct{})}
	p := ownPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tracer })
	s := newTestStoreOn(t, p)
	tracer.claimNew = s.sql.claimNew
	errs := make([]error, n)
	go func() {
		// Both lanes are held once two claims went out alone; the others
		// then queue for them.
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
			if tracer.held.Load() >= batchLanes && s.newClaims.Waiting() >= 2 {
				break
			}
		}
		close(tracer.release)
	}()
	storetest.Together(n, func(i int) {
		key := fmt.Sprint("key-", i)
		rec, claimed, err := s.Claim(t.Context(), key, "fp", fmt.Sprint("token-", i), time.Minute)
		if err == nil && !claimed {
			err = fmt.Errorf("%s: not claimed", key)
		}
		if err == nil {
			err = s.Complete(t.Context(), key, rec.Owner, &store.Response{Status: 201, Body: []byte(key)}, time.Minute)
		}
		errs[i] = err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Greater(t, tracer.largest.Load(), int64(1), "no batch held two claims")
	for i := range n {
		key := fmt.Sprint("key-", i)
		rec, claimed, err := s.Claim(t.Context(), key, "fp", "token-replay", time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, store.StateCompleted, rec.State, key)
		assert.Equal(t, key, string(rec.Response.Body), "each completion stored its own response")
	}
}

// heldLanes is a pgx tracer that holds the first batchLanes lone new
// claims until release is closed, and notes the largest batch of new
// claims sent.
type heldLanes struct {
	claimNew string
	release  chan struct{}
	held     atomic.Int64
	largest  atomic.Int64
}

func (h *heldLanes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == h.claimNew && h.held.Add(1) <= batchLanes {
		<-h.release
	}
	return ctx
}

func (h *heldLanes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (h *heldLanes) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	queued := data.Batch.QueuedQueries
	if queued[len(queued)-1].SQL != h.claimNew {
		return ctx
	}
	for n := int64(len(queued) - 1); ; { // after the lock timeout's statement
		most := h.largest.Load()
		if n <= most || h.largest.CompareAndSwap(most, n) {
			return ctx
		}
	}
}

func (h *heldLanes) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (h *heldLanes) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestBatchOfClaimsOfOneKey: of several claims of one key in one batch,
// exactly one inserts the row.
func TestBatchOfClaimsOfOneKey(t *testing.T) {
	s := newTestStore(t)
	row := rowKey("one")
	calls := make([]*newClaimCall, 4)
	for i := range calls {
		calls[i] = &newClaimCall{row: row, fingerprint: []byte("fp"), token: fmt.Appendf(nil, "token-%d", i), leaseUs: time.Minute.Microseconds()}
	}
	require.Empty(t, s.sendNewClaims(t.Context(), calls), "the batch failed")
	inserted := 0
	for _, c := range calls {
		require.NoError(t, c.err)
		if c.inserted {
			inserted++
		}
	}
	assert.Equal(t, 1, inserted)
}

// completeCalls claims each key on s and returns the calls that complete
// it with a response naming it.
func completeCalls(t *testing.T, s *Store, keys ...string) []*completeCall {
	calls := make([]*completeCall, len(keys))
	for i, key := range keys {
		owner := mustClaim(t, s, key, "fp", "token-"+key, time.Minute).Owner
		calls[i] = &completeCall{args: []any{rowKey(key), []byte(owner.Token), owner.Fence,
			int16(store.StateCompleted), int32(201), [][]byte(nil), []byte(key), time.Minute.Microseconds()}}
	}
	return calls
}

// keyOf is the key a call of completeCalls completes: its response's body.
func keyOf(c *completeCall) string { return string(c.args[6].([]byte)) }

// requireResponse requires key to be completed with the response naming
// it.
func requireResponse(t *testing.T, s *Store, key string) {
	t.Helper()
	rec, claimed, err := s.Claim(t.Context(), key, "fp", "token-replay", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, store.StateCompleted, rec.State, key)
	assert.Equal(t, key, string(rec.Response.Body), "%s's completion stored its own response", key)
}

// TestBatchOfCompletions: each call of a batch, which sorts them, is told
// its own outcome.
func TestBatchOfCompletions(t *testing.T) {
	s := newTestStore(t)
	keys := []string{"a", "b", "c", "d"}
	calls := completeCalls(t, s, keys...)
	stale := &completeCall{args: slices.Clone(calls[2].args)}
	stale.args[2] = int64(99) // a fence that never held "c"
	calls = append(calls, stale)
	require.Empty(t, s.sendCompletes(t.Context(), calls), "the batch failed")
	for _, c := range calls {
		require.NoError(t, c.err)
		assert.Equal(t, c != stale, c.found)
	}
	for _, key := range keys {
		requireResponse(t, s, key)
	}
}

// TestFailedBatchCommitsNothing: a statement that fails fails its batch,
// which commits nothing and leaves each call to be sent alone; then only
// the failing one fails.
func TestFailedBatchCommitsNothing(t *testing.T) {
	s := newTestStoreOn(t, ownPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 }))
	calls := completeCalls(t, s, "key-0", "key-1", "key-2")
	failing := calls[1]
	failing.args[7] = int64(math.MaxInt64)       // out of an interval's range
	again := s.sendCompletes(t.Context(), calls) // sorts calls
	require.ElementsMatch(t, calls, again, "a failed batch leaves every call to be sent alone")
	var lockTimeout string
	require.NoError(t, s.pool.QueryRow(t.Context(), "SHOW lock_timeout").Scan(&lockTimeout))
	assert.Equal(t, "0", lockTimeout, "the batch's lock timeout outlived it on the pool's one connection")
	for _, c := range calls {
		require.NoError(t, c.err)
		requireInFlight(t, s, keyOf(c))
	}
	for _, c := range calls {
		s.completeAlone(t.Context(), c)
		if c == failing {
			assert.Error(t, c.err, "the completion past the end of time")
			continue
		}
		require.NoError(t, c.err)
		requireResponse(t, s, keyOf(c))
	}
}

// TestBatchWaitsBrieflyForRowLocks: a completion whose row a transactional
// claim took over waits for that transaction; in a batch, the others wait
// only the batch's lock timeout, then go alone.
func TestBatchWaitsBrieflyForRowLocks(t *testing.T) {
	txs := newTestTxStore(t)
	s := txs.Store
	lapsed := mustClaim(t, s, "lapsed", "fp", "token-lapsed", time.Millisecond).Owner
	time.Sleep(5 * time.Millisecond)
	_, _, tx, err := txs.BeginClaim(t.Context(), "lapsed", "fp", "token-tx")
	require.NoError(t, err)
	require.NotNil(t, tx, "the transactional claim took the lapsed key over")
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })

	calls := completeCalls(t, s, "a", "b")
	calls = append(calls, &completeCall{args: []any{rowKey("lapsed"), []byte(lapsed.Token), lapsed.Fence,
		int16(store.StateCompleted), int32(201), [][]byte(nil), []byte("lapsed"), time.Minute.Microseconds()}})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	again := s.sendCompletes(ctx, calls)
	assert.Less(t, time.Since(start), 4*time.Second, "the batch waited for the transaction")
	require.ElementsMatch(t, calls, again, "a batch that met a held row lock fails")
	for _, c := range calls {
		require.NoError(t, c.err)
	}
	for _, c := range calls {
		if key := keyOf(c); key != "lapsed" {
			s.completeAlone(t.Context(), c)
			require.NoError(t, c.err)
			requireResponse(t, s, key)
		}
	}
}

// requireInFlight requires key to be in flight, its claim not completed.
func requireInFlight(t *testing.T, s *Store, key string) {
	t.Helper()
	rec, claimed, err := s.Claim(t.Context(), key, "fp", "token-look", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	assert.Equal(t, store.StateInFlight, rec.State, "%s was completed by a failed batch", key)
}
