package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// newTestTxStore returns a store in transactional mode on a fresh file,
// with the table migrated and a ledger table for handlers to write.
func newTestTxStore(t testing.TB, opts ...Option) *TxStore {
	t.Helper()
	s := NewTx(openTestDB(t, testFile(t)), opts...)
	require.NoError(t, s.Migrate(context.Background()))
	_, err := s.db.Exec(ledgerSchema)
	require.NoError(t, err)
	return s
}

// ledgerSchema is a table a handler writes in its transaction: one row per
// run that committed.
const ledgerSchema = `CREATE TABLE IF NOT EXISTS ledger (key TEXT NOT NULL, run TEXT NOT NULL)`

// TestTxConformance runs the shared suites, the plain one and the
// transactional one, against NewTx's store.
func TestTxConformance(t *testing.T) {
	t.Run("Run", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newTestTxStore(t) })
	})
	t.Run("RunTx", func(t *testing.T) {
		storetest.RunTx(t, func(t *testing.T) store.TxStore { return newTestTxStore(t) })
	})
}

// newTestTxStoreOn returns a store in transactional mode on path, through
// a *sql.DB of its own, with the table and the ledger migrated.
func newTestTxStoreOn(t testing.TB, path string, opts ...Option) *TxStore {
	t.Helper()
	s := NewTx(openTestDB(t, path), opts...)
	require.NoError(t, s.Migrate(context.Background()))
	_, err := s.db.Exec(ledgerSchema)
	require.NoError(t, err)
	return s
}

// runTx is a request in transactional mode, as run: if BeginClaim of key
// wins, it writes a ledger row for run through Tx and, if commit, commits
// with the response run; otherwise it leaves the transaction open.
func runTx(ctx context.Context, s *TxStore, key, run string, commit bool) (claimed bool, err error) {
	txCtx, _, tx, err := s.BeginClaim(ctx, key, "fp", run)
	if tx == nil {
		return false, err
	}
	q, err := Tx(txCtx)
	if err == nil {
		_, err = q.ExecContext(txCtx, `INSERT INTO ledger (key, run) VALUES (?, ?)`, key, run)
	}
	switch {
	case err != nil:
		return true, errors.Join(err, tx.Rollback(ctx))
	case !commit:
		return true, nil
	}
	return true, tx.Commit(ctx, &store.Response{Status: http.StatusCreated, Body: []byte(run)}, time.Hour)
}

// plainRun is runTx through the plain store s: its row and its record
// commit apart.
func plainRun(ctx context.Context, s *Store, key, run string) (claimed bool, err error) {
	rec, claimed, err := s.Claim(ctx, key, "fp", run, time.Minute)
	if !claimed {
		return false, err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO ledger (key, run) VALUES (?, ?)`, key, run); err != nil {
		return true, errors.Join(err, s.Release(ctx, key, rec.Owner))
	}
	return true, s.Complete(ctx, key, rec.Owner, &store.Response{Status: http.StatusCreated, Body: []byte(run)}, time.Hour)
}

// ledgerRuns returns the runs the ledger holds for key.
func ledgerRuns(t testing.TB, db *sql.DB, key string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT run FROM ledger WHERE key = ? ORDER BY rowid`, key)
	require.NoError(t, err)
	defer rows.Close()
	runs := []string{}
	for rows.Next() {
		var run string
		require.NoError(t, rows.Scan(&run))
		runs = append(runs, run)
	}
	require.NoError(t, rows.Err())
	return runs
}

// TestTxAccessor: Tx refuses a context no TxStore claimed and a
// transaction that has ended; the Querier it gave is unusable then.
func TestTxAccessor(t *testing.T) {
	s := newTestTxStore(t)
	_, err := Tx(t.Context())
	require.ErrorIs(t, err, ErrNoTx)

	txCtx, _, tx, err := s.BeginClaim(t.Context(), "k", "fp", "run-1")
	require.NoError(t, err)
	q, err := Tx(txCtx)
	require.NoError(t, err)
	again, err := Tx(txCtx)
	require.NoError(t, err)
	assert.Equal(t, q, again, "later calls return the transaction the first began")
	_, err = q.ExecContext(txCtx, `INSERT INTO ledger (key, run) VALUES ('k', 'run-1')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context(), nil, time.Hour))

	_, err = Tx(txCtx)
	require.ErrorIs(t, err, errTxEnded)
	_, err = q.ExecContext(txCtx, `INSERT INTO ledger (key, run) VALUES ('k', 'late')`)
	require.ErrorIs(t, err, sql.ErrConnDone, "a statement after the end runs nowhere")
	assert.Equal(t, []string{"run-1"}, ledgerRuns(t, s.db, "k"))
}

// TestTxRaceAcrossProcesses: this process and a helper process race
// requests in transactional mode on the same keys, beside plain requests
// through a handle of their own (plainRun): of each key's 18 racers the
// ledger holds exactly one run, the one whose response the record stores.
func TestTxRaceAcrossProcesses(t *testing.T) {
	const keys, racers = 30, 18
	path := testFile(t)
	s := newTestTxStoreOn(t, path)
	plain := newTestStoreOn(t, path)
	helper := startHelper(t, path)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners = map[string][]string{}
	)
	for k := range keys {
		key := fmt.Sprint("key-", k)
		for r := range racers {
			run := fmt.Sprintf("%s-run-%d", key, r)
			wg.Go(func() {
				var claimed bool
				var err error
				switch r % 3 {
				case 0:
					claimed, err = runTx(context.Background(), s, key, run, true)
				case 1:
					claimed, err = helper.runTx(key, run, false)
				default:
					claimed, err = plainRun(context.Background(), plain, key, run)
				}
				assert.NoError(t, err, run)
				if claimed {
					mu.Lock()
					winners[key] = append(winners[key], run)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprint("key-", k)
		require.Len(t, winners[key], 1, "%s: one winner", key)
		assert.Equal(t, winners[key], ledgerRuns(t, s.db, key), "%s: the ledger holds the winner's run", key)
		rec, claimed, err := s.Claim(t.Context(), key, "fp", "late", time.Minute)
		require.NoError(t, err)
		require.False(t, claimed)
		assert.Equal(t, winners[key][0], string(rec.Response.Body), "%s: the record stores the winner's response", key)
	}
}

// TestTxMiddleware: through the middleware, 10 keys x 10 concurrent
// duplicates run each handler once, its row committed with the response
// every duplicate gets; a 5xx rolls its row back and frees the key.
func TestTxMiddleware(t *testing.T) {
	const keys, dups = 10, 10
	s := newTestTxStore(t)
	h := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(time.Minute))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			q, err := Tx(r.Context())
			if err == nil {
				_, err = q.ExecContext(r.Context(), `INSERT INTO ledger (key, run) VALUES (?, ?)`, key, r.Header.Get("X-Run"))
			}
			if err != nil || r.Header.Get("X-Fail") != "" {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			time.Sleep(10 * time.Millisecond) // duplicates arrive while the transaction is open
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(r.Header.Get("X-Run")))
		}))
	send := func(key, run string, fail bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/payments", nil)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Run", run)
		if fail {
			req.Header.Set("X-Fail", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}

	assert.Equal(t, http.StatusServiceUnavailable, send("key-0", "failed", true).Code)
	assert.Empty(t, ledgerRuns(t, s.db, "key-0"), "the 5xx's row was rolled back")
	bodies := make([][]string, keys)
	var wg sync.WaitGroup
	for k := range keys {
		bodies[k] = make([]string, dups)
		for d := range dups {
			wg.Go(func() {
				w := send(fmt.Sprint("key-", k), fmt.Sprint("run-", d), false)
				assert.Equal(t, http.StatusCreated, w.Code)
				bodies[k][d] = w.Body.String()
			})
		}
	}
	wg.Wait()
	for k, got := range bodies {
		runs := ledgerRuns(t, s.db, fmt.Sprint("key-", k))
		require.Len(t, runs, 1, "key %d: one committed run", k)
		for _, body := range got {
			assert.Equal(t, runs[0], body, "key %d: every duplicate gets the committed run's response", k)
		}
	}
}

// TestTxDo: a job run by idempotency.Do on NewTx's store writes through Tx
// in the claim's transaction: an error rolls its row back with the claim,
// and a success commits the row with the result later callers get.
func TestTxDo(t *testing.T) {
	s := newTestTxStore(t)
	job := func(fail bool) func(ctx context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			q, err := Tx(ctx)
			if err == nil {
				_, err = q.ExecContext(ctx, `INSERT INTO ledger (key, run) VALUES ('job', 'run')`)
			}
			if err == nil && fail {
				err = errors.New("the job failed after its write")
			}
			return []byte("done"), err
		}
	}
	_, err := idempotency.Do(t.Context(), s, "job", job(true))
	require.Error(t, err)
	assert.Empty(t, ledgerRuns(t, s.db, "job"), "the failed run's row was rolled back")
	for range 2 {
		got, err := idempotency.Do(t.Context(), s, "job", job(false))
		require.NoError(t, err)
		assert.Equal(t, "done", string(got))
	}
	assert.Equal(t, []string{"run"}, ledgerRuns(t, s.db, "job"), "the job ran once")
}
