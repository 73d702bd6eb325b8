package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// ledger creates a table of payments beside s's, dropped when the test
// ends, and returns its name.
func ledger(t *testing.T, s *Store) string {
	t.Helper()
	name := s.table + "_ledger"
	_, err := s.db.Exec("CREATE TABLE " + name + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, payment VARCHAR(64) NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := s.db.Exec("DROP TABLE IF EXISTS " + name)
		require.NoError(t, err)
	})
	return name
}

// paid returns how many ledger rows name payment.
func paid(t *testing.T, db *sql.DB, ledger, payment string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+ledger+" WHERE payment = ?", payment).Scan(&n))
	return n
}

// payments is a handler that writes a ledger row through the request's
// transaction and answers status.
func payments(t *testing.T, ledger string, status func(r *http.Request) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusBadRequest)
			return
		}
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO "+ledger+" (payment) VALUES (?)", r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(status(r))
	})
}

// TestHandlerWritesCommitWithTheRecord: a recorded answer commits the
// handler's row with the record, and its duplicate is replayed; an answer
// that is not recorded rolls the row back with the claim, and the key is
// free at once.
func TestHandlerWritesCommitWithTheRecord(t *testing.T) {
	s := newTestTxStore(t)
	book := ledger(t, s.Store)
	status := http.StatusCreated
	h := idempotency.New(idempotency.WithStore(s))(payments(t, book, func(*http.Request) int { return status }))

	require.Equal(t, http.StatusCreated, sendTo(h, "kept").Code)
	require.Equal(t, "true", sendTo(h, "kept").Header().Get("Idempotent-Replayed"))
	require.Equal(t, 1, paid(t, s.db, book, "kept"))

	status = http.StatusInternalServerError
	require.Equal(t, http.StatusInternalServerError, sendTo(h, "undone").Code)
	require.Equal(t, 0, paid(t, s.db, book, "undone"), "the 500's row was rolled back")
	status = http.StatusCreated
	require.Equal(t, http.StatusCreated, sendTo(h, "undone").Code, "the key was free at once")
	require.Equal(t, 1, paid(t, s.db, book, "undone"))
}

// TestLostConnectionFreesTheKey: a transaction whose connection ends (a
// crashed worker) leaves neither the handler's row nor a live claim: the
// next claim takes the key over at once, with a higher fence.
func TestLostConnectionFreesTheKey(t *testing.T) {
	s := newTestTxStore(t)
	book := ledger(t, s.Store)
	txCtx, rec, tx, err := s.BeginClaim(context.Background(), "k", "fp", newToken())
	require.NoError(t, err)
	require.NotNil(t, tx)
	handlerTx, ok := Tx(txCtx)
	require.True(t, ok)
	_, err = handlerTx.Exec("INSERT INTO " + book + " (payment) VALUES ('k')")
	require.NoError(t, err)
	_, _, lost, err := s.BeginClaim(context.Background(), "k", "fp", newToken())
	require.NoError(t, err)
	require.Nil(t, lost, "the key is held")

	var id int64
	require.NoError(t, handlerTx.QueryRow("SELECT CONNECTION_ID()").Scan(&id))
	_, err = s.db.Exec(fmt.Sprintf("KILL %d", id))
	require.NoError(t, err)
	_ = tx.Rollback(context.Background())

	// The server ends the killed session, and frees its lock, soon after
	// KILL returns.
	var again store.Record
	require.Eventually(t, func() bool {
		var claimed bool
		again, claimed, err = s.Claim(context.Background(), "k", "fp", newToken(), longLease)
		return err == nil && claimed
	}, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, again.Owner.Fence, rec.Owner.Fence)
	require.Equal(t, 0, paid(t, s.db, book, "k"), "the lost transaction's row was rolled back")
}

// TestForcedDeleteOfAnOpenTransaction: a forced Delete frees a key an open
// transaction holds; until that transaction ends, transactional claims of
// the key find it in flight (its named lock is still held), a plain claim
// takes it over with a higher fence, and the transaction cannot commit.
func TestForcedDeleteOfAnOpenTransaction(t *testing.T) {
	s := newTestTxStore(t)
	_, rec, tx, err := s.BeginClaim(context.Background(), "k", "fp", newToken())
	require.NoError(t, err)
	require.NotNil(t, tx)
	deleted, err := s.Delete(context.Background(), store.HashKey("k"), true)
	require.NoError(t, err)
	require.True(t, deleted)

	_, held, lost, err := s.BeginClaim(context.Background(), "k", "fp", newToken())
	require.NoError(t, err, "a key whose lock another transaction holds is in flight, not an error")
	require.Nil(t, lost)
	require.Equal(t, store.StateInFlight, held.State)
	taken, claimed, err := s.Claim(context.Background(), "k", "fp", newToken(), longLease)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Greater(t, taken.Owner.Fence, rec.Owner.Fence)
	require.ErrorIs(t, tx.Commit(context.Background(), &store.Response{Status: 201}, longLease), store.ErrNotOwner)
}

// TestPlainAndTransactionalTogether: plain and transactional middlewares
// on one table, each request 8 times at once across both, run each
// payment exactly once.
func TestPlainAndTransactionalTogether(t *testing.T) {
	tx := newTestTxStore(t)
	book := ledger(t, tx.Store)
	plain := New(tx.db, WithTable(tx.table))
	write := payments(t, book, func(*http.Request) int { return http.StatusCreated })
	handlers := []http.Handler{
		idempotency.New(idempotency.WithStore(tx))(write),
		idempotency.New(idempotency.WithStore(plain))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := tx.db.ExecContext(r.Context(), "INSERT INTO "+book+" (payment) VALUES (?)", r.Header.Get("Idempotency-Key"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})),
	}
	const keys, duplicates = 20, 8
	var wg sync.WaitGroup
	for k := range keys {
		for d := range duplicates {
			wg.Go(func() { sendTo(handlers[(k+d)%2], fmt.Sprint("pay-", k)) })
		}
	}
	wg.Wait()
	for k := range keys {
		require.Equal(t, 1, paid(t, tx.db, book, fmt.Sprint("pay-", k)), "pay-%d", k)
	}
}

// TestTxOutsideARequest: a context without a claim holds no transaction.
func TestTxOutsideARequest(t *testing.T) {
	_, ok := Tx(context.Background())
	require.False(t, ok)
}

// TestTxRoundTrips: a transactional first request costs the round trips
// docs/mysql.md says, and a replay one.
func TestTxRoundTrips(t *testing.T) {
	cfg := testConfig(t)
	rt := &roundTrips{}
	cfg.DialFunc = rt.dial
	s := &TxStore{Store: newTestStoreOn(t, openDB(t, cfg, 1))}
	h := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	sendTo(h, "warm-up")
	count := func(key string) int64 {
		before := rt.n.Load()
		sendTo(h, key)
		return rt.n.Load() - before
	}
	require.EqualValues(t, 5, count("k"), "first request: claim, START TRANSACTION, complete, COMMIT, the lock's release")
	require.EqualValues(t, 1, count("k"), "replay")
}
