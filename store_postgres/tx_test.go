package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestTxConformance runs the shared store suite against the plain methods
// of the transactional store.
func TestTxConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newTestTxStore(t) })
}

// newTestTxStore returns a transactional store on a fresh table of its own,
// beside which a ledger table (name + "_ledger", one text column) stands
// for the handler's own data.
func newTestTxStore(t *testing.T) *TxStore {
	t.Helper()
	s := &TxStore{Store: newTestStore(t)}
	_, err := s.pool.Exec(context.Background(), `CREATE TABLE `+s.ledger()+` (id text PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+s.ledger())
		require.NoError(t, err)
	})
	return s
}

func (s *TxStore) ledger() string { return pgx.Identifier{s.table + "_ledger"}.Sanitize() }

// ledgerRows returns the committed ids in the ledger, as another
// connection sees them.
func (s *TxStore) ledgerRows(t *testing.T) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT id FROM `+s.ledger()+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// rows returns how many committed rows the store's table holds for key.
func (s *TxStore) rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+s.name+` WHERE key = $1`, []byte(store.HashKey(key))).Scan(&n))
	return n
}

// mustBeginClaim claims key in a transaction and writes id to the ledger
// through the transaction the handler would get.
func mustBeginClaim(t *testing.T, s *TxStore, key, fingerprint, id string) (store.Record, store.Tx) {
	t.Helper()
	ctx, rec, tx, err := s.BeginClaim(context.Background(), key, fingerprint, "token-"+id)
	require.NoError(t, err)
	require.NotNil(t, tx, "the key is claimed")
	// A failed assertion must not leave the transaction open: the table's
	// DROP at cleanup would wait for it until the test binary times out.
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	handlerTx, ok := Tx(ctx)
	require.True(t, ok, "the context carries the transaction")
	_, err = handlerTx.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ($1)`, id)
	require.NoError(t, err)
	return rec, tx
}

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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, rec, second, err := s.BeginClaim(ctx, "k", fp, "second")
		require.NoError(t, err, "a transactional claim waited for the holder")
		assert.Nil(t, second)
		assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: fp}, rec,
			"in flight, TTL 0, and the caller's fingerprint: the holder's row is not visible")

		rec, claimed, err := s.Claim(ctx, "k", fp, "plain", time.Minute)
		require.NoError(t, err, "a plain claim waited for the holder")
		assert.False(t, claimed)
		assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: fp}, rec)
		cancel()
	}
	assert.Zero(t, s.rows(t, "k"))
}

// TestTxTakeoverIsNotWaitedFor: a transaction that takes over a plain
// claim's expired lease has updated (and locked) the committed row; other
// claims and the sweeper neither wait for it nor change the row.
func TestTxTakeoverIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	old, _, err := s.Claim(context.Background(), "k", "old", "old-owner", time.Microsecond)
	require.NoError(t, err)
	rec, tx := mustBeginClaim(t, s, "k", "fp", "pay_1")
	assert.Equal(t, old.Owner.Fence+1, rec.Owner.Fence, "a takeover raises the fence")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, got, second, err := s.BeginClaim(ctx, "k", "fp", "second")
	require.NoError(t, err)
	assert.Nil(t, second)
	assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: "fp"}, got)
	got, claimed, err := s.Claim(ctx, "k", "fp", "plain", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.Record{State: store.StateInFlight, Fingerprint: "fp"}, got)
	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "the sweeper skips the row being taken over")

	require.NoError(t, tx.Commit(ctx, &store.Response{Status: 201}, time.Hour))
	assert.ErrorIs(t, s.Complete(ctx, "k", old.Owner, nil, time.Hour), store.ErrNotOwner)
	got, _, err = s.Claim(ctx, "k", "fp", "plain", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, store.StateCompleted, got.State)
	assert.Equal(t, []string{"pay_1"}, s.ledgerRows(t))
}

// TestTxPlainClaimHoldsOff: a key claimed by a plain Store is in flight
// for BeginClaim, which sees the plain claim's committed record.
func TestTxPlainClaimHoldsOff(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	ctx := context.Background()
	_, claimed, err := s.Claim(ctx, "k", "plain-fp", "plain", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	_, rec, tx, err := s.BeginClaim(ctx, "k", "fp", "tx")
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
			_, _, err := s.Claim(context.Background(), key, "old", "old-owner", time.Microsecond)
			require.NoError(t, err)
		}
		var (
			mu      sync.Mutex
			winners []store.Tx
			plain   int
			wg      sync.WaitGroup
		)
		ready := make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := range txClaims + plainClaims {
			wg.Go(func() {
				<-ready
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
		}
		close(ready)
		wg.Wait()
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
	handlerTx, _ := Tx(txCtx)
	_, err = handlerTx.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ('pay_1')`)
	require.NoError(t, err)
	_, err = handlerTx.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ('pay_1')`)
	require.Error(t, err, "a duplicate id")

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
	_, err = handlerTx.Exec(ctx, `INSERT INTO `+s.ledger()+` (id) VALUES ('pay_1')`)
	require.NoError(t, err, "the transaction is still open")
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
