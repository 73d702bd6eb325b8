package pgstore

import (
	"context"
	"fmt"
	"math"
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
		for tracer.held.Load() < batchLanes {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
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
	if data.Batch.QueuedQueries[0].SQL != h.claimNew {
		return ctx
	}
	for n := int64(data.Batch.Len()); ; {
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
	s.sendNewClaims(t.Context(), calls)
	inserted := 0
	for _, c := range calls {
		require.NoError(t, c.err)
		if c.inserted {
			inserted++
		}
	}
	assert.Equal(t, 1, inserted)
}

// TestFailedBatchSendsEachCallAlone: a statement that fails fails its
// batch; every call is then sent alone, and only the failing one fails.
func TestFailedBatchSendsEachCallAlone(t *testing.T) {
	s := newTestStore(t)
	owners := make([]store.Record, 3)
	calls := make([]*completeCall, len(owners))
	for i := range owners {
		key := fmt.Sprint("key-", i)
		owners[i] = mustClaim(t, s, key, "fp", fmt.Sprint("token-", i), time.Minute)
		retentionUs := time.Minute.Microseconds()
		if i == 1 {
			retentionUs = math.MaxInt64 // out of an interval's range: the statement fails
		}
		calls[i] = &completeCall{args: []any{rowKey(key), []byte(owners[i].Owner.Token), owners[i].Owner.Fence,
			int16(store.StateCompleted), int32(201), [][]byte(nil), []byte(key), retentionUs}}
	}
	byKey := map[*completeCall]int{calls[0]: 0, calls[1]: 1, calls[2]: 2}
	s.sendCompletes(t.Context(), calls)
	for _, c := range calls {
		i := byKey[c]
		if i == 1 {
			assert.Error(t, c.err, "the completion past the end of time")
			continue
		}
		require.NoError(t, c.err)
		assert.True(t, c.found)
		rec, _, err := s.Claim(t.Context(), fmt.Sprint("key-", i), "fp", "token-replay", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, store.StateCompleted, rec.State)
	}
}
