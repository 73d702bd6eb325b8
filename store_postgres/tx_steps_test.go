package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// stepFixture serves a handler in transactional mode that runs the steps
// "charge" and "ledger", each inserting its row (key:step) into the ledger
// through Tx, then answers 201. Its hooks run inside the named step's fn,
// after the step's write.
type stepFixture struct {
	s     *TxStore
	runs  map[string]*atomic.Int32
	mu    sync.Mutex
	hooks map[string]func(ctx context.Context) error
}

// setHook sets (nil: removes) the hook of step name.
func (f *stepFixture) setHook(name string, hook func(ctx context.Context) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks[name] = hook
}

func (f *stepFixture) hook(name string) func(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hooks[name]
}

func newStepFixture(t *testing.T) *stepFixture {
	return newStepFixtureOn(newTestTxStore(t))
}

// newStepFixtureOn is newStepFixture on s.
func newStepFixtureOn(s *TxStore) *stepFixture {
	return &stepFixture{
		s:     s,
		runs:  map[string]*atomic.Int32{"charge": {}, "ledger": {}},
		hooks: map[string]func(ctx context.Context) error{},
	}
}

func (f *stepFixture) handler(opts ...idempotency.Option) http.Handler {
	opts = append([]idempotency.Option{idempotency.WithStore(f.s)}, opts...)
	return idempotency.New(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		for _, name := range []string{"charge", "ledger"} {
			_, err := idempotency.Step(r.Context(), name, func(ctx context.Context) (string, error) {
				f.runs[name].Add(1)
				if err := f.s.writeLedger(ctx, key+":"+name); err != nil {
					return "", err
				}
				if hook := f.hook(name); hook != nil {
					return "", hook(ctx)
				}
				return name + "-done", nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"` + key + `"}`))
	}))
}

// recordedSteps returns the names of the steps the table's one row holds.
func (f *stepFixture) recordedSteps(t *testing.T) []string {
	t.Helper()
	var steps [][]byte
	err := f.s.pool.QueryRow(context.Background(), `SELECT steps FROM `+f.s.name).Scan(&steps)
	if err != nil {
		return nil
	}
	decoded, err := decodeSteps(steps)
	require.NoError(t, err)
	var names []string
	for _, step := range decoded {
		names = append(names, step.Name)
	}
	return names
}

// TestTxStepCommitsRowsWithPoint: inside a step nothing of its is visible
// to others; once the step returns, its row and its recovery point are
// both committed, while the request is still running; the response then
// commits the rest.
func TestTxStepCommitsRowsWithPoint(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var during, after []string
	var afterSteps []string
	f.setHook("charge", func(context.Context) error {
		during = f.s.ledgerRows(t)
		return nil
	})
	f.setHook("ledger", func(context.Context) error {
		after, afterSteps = f.s.ledgerRows(t), f.recordedSteps(t)
		return nil
	})
	w := sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Empty(t, during, "a step's write is not visible before it commits")
	assert.Equal(t, []string{"k:charge"}, after, "the first step's row is committed before the second step ends")
	assert.Equal(t, []string{"charge"}, afterSteps, "with its recovery point")
	assert.ElementsMatch(t, []string{"k:charge", "k:ledger"}, f.s.ledgerRows(t))
}

// TestTxStepErrorLeavesNothing: a step whose fn fails rolls back its row
// and records no point; the retry runs it again, once, and the step before
// it not at all.
func TestTxStepErrorLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	f.setHook("ledger", func(context.Context) error { return errors.New("ledger down") })
	w := sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Equal(t, []string{"k:charge"}, f.s.ledgerRows(t), "only the step that succeeded left its row")
	assert.Equal(t, []string{"charge"}, f.recordedSteps(t))

	f.setHook("ledger", nil)
	w = sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, int32(1), f.runs["charge"].Load(), "the recorded step did not run again")
	assert.Equal(t, int32(2), f.runs["ledger"].Load(), "the failed step ran again once")
	assert.ElementsMatch(t, []string{"k:charge", "k:ledger"}, f.s.ledgerRows(t))
}

// TestTxStepKilledConnectionLeavesNothing: a step whose transaction's
// connection is killed by the server mid-step (as when its process dies)
// leaves neither its row nor its point; the retry runs it again exactly
// once.
func TestTxStepKilledConnectionLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	f.setHook("charge", func(ctx context.Context) error {
		killStep(t, f.s, ctx)
		return nil
	})
	w := sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusInternalServerError, w.Code, w.Body.String())
	assert.Empty(t, f.s.ledgerRows(t), "the killed step's row is gone")
	assert.Empty(t, f.recordedSteps(t), "and so is its point")

	f.setHook("charge", nil)
	w = sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, int32(2), f.runs["charge"].Load(), "the killed step ran again exactly once")
	assert.ElementsMatch(t, []string{"k:charge", "k:ledger"}, f.s.ledgerRows(t))
}

// TestTxStepAbandonedRunResumes: a run that stops for good after its first
// step (its lease left to lapse, as when its process dies) is taken over
// by the retry, which gets the step back and runs only the rest.
func TestTxStepAbandonedRunResumes(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	stuck := make(chan struct{})
	f.setHook("ledger", func(ctx context.Context) error {
		killStep(t, f.s, ctx) // its row would hold the retry's back
		<-stuck
		return errors.New("stopped")
	})
	// The stuck run's lease is never renewed: the store under it refuses
	// renewals, as a dead process sends none.
	h := f.handler(idempotency.WithStore(noRenew{f.s}), idempotency.WithLease(300*time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		sendTo(h, "k", nil)
	}()
	require.Eventually(t, func() bool { return f.runs["ledger"].Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(400 * time.Millisecond)

	f.setHook("ledger", nil)
	w := sendTo(f.handler(), "k", nil)
	close(stuck)
	<-done
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, int32(1), f.runs["charge"].Load(), "the taken-over run got the step back")
	assert.Equal(t, int32(2), f.runs["ledger"].Load())
	assert.ElementsMatch(t, []string{"k:charge", "k:ledger"}, f.s.ledgerRows(t))
}

// killStep has the server end the connection of the step whose context
// is ctx, as a crash of its process does.
func killStep(t *testing.T, s *TxStore, ctx context.Context) {
	tx, ok := Tx(ctx)
	require.True(t, ok)
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	_, err := s.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
}

// noRenew is a TxStepStore whose renewals never reach the database.
type noRenew struct{ *TxStore }

func (noRenew) Renew(context.Context, string, store.Lease, time.Duration) error { return nil }

// TestTxStepRacingDuplicates: duplicates of one key sent at once, each
// retrying until it gets the response, run each step once.
func TestTxStepRacingDuplicates(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	h := f.handler()
	const clients = 8
	codes := make([]int, clients)
	bodies := make([]string, clients)
	storetest.Together(clients, func(i int) {
		for {
			w := sendTo(h, "k", nil)
			if w.Code != http.StatusConflict {
				codes[i], bodies[i] = w.Code, w.Body.String()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	for i := range clients {
		assert.Equal(t, http.StatusCreated, codes[i], bodies[i])
		assert.Equal(t, bodies[0], bodies[i])
	}
	assert.Equal(t, int32(1), f.runs["charge"].Load())
	assert.Equal(t, int32(1), f.runs["ledger"].Load())
	assert.ElementsMatch(t, []string{"k:charge", "k:ledger"}, f.s.ledgerRows(t))
}

// TestTxStepPanicLeavesNothing: a step whose fn panics has its transaction
// rolled back and its connection returned to the pool; the panic goes on.
func TestTxStepPanicLeavesNothing(t *testing.T) {
	t.Parallel()
	// A pool of its own, whose connections no other test holds.
	f := newStepFixtureOn(newTestTxStoreOn(t, ownPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })))
	f.setHook("charge", func(context.Context) error { panic("boom") })
	assert.PanicsWithValue(t, "boom", func() { sendTo(f.handler(), "k", nil) })
	assert.Empty(t, f.s.ledgerRows(t))
	assert.Empty(t, f.recordedSteps(t))
	assert.Eventually(t, func() bool { return f.s.pool.Stat().AcquiredConns() == 0 }, 5*time.Second, 5*time.Millisecond,
		"no connection stays held")
}

// TestTxStepNestedIsRefused: a step begun inside another step's fn, in the
// transactional mode, is refused with ErrStepMisused, its fn not run.
func TestTxStepNestedIsRefused(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var nested error
	f.setHook("charge", func(ctx context.Context) error {
		_, nested = idempotency.Step(ctx, "inner", func(context.Context) (int, error) {
			t.Error("the nested step ran")
			return 0, nil
		})
		return nil
	})
	w := sendTo(f.handler(), "k", nil)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.ErrorIs(t, nested, idempotency.ErrStepMisused)
}

// TestTxStepsHoldOneConnection: a run with steps holds one pool connection
// at a time, so four times more runs at once than the pool has connections
// all finish. A run that held its transaction's connection while it waited
// for its step's would deadlock the pool: each request here has 10 s.
func TestTxStepsHoldOneConnection(t *testing.T) {
	t.Parallel()
	f := newStepFixtureOn(newTestTxStoreOn(t, ownPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })))
	f.setHook("charge", func(context.Context) error {
		time.Sleep(20 * time.Millisecond) // a provider's call, which keeps the step open
		return nil
	})
	h := f.handler()
	const runs = 8
	codes := make([]int, runs)
	storetest.Together(runs, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", fmt.Sprintf("k%d", i))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes[i] = w.Code
	})
	for i, code := range codes {
		assert.Equal(t, http.StatusCreated, code, "run %d", i)
	}
	assert.Len(t, f.s.ledgerRows(t), 2*runs, "every run's two steps committed")
}

// TestTxStepsInDo: a Do job in the transactional mode runs atomic steps
// too. Its first run records "charge" (its ledger row committed with the
// point) and then fails, releasing the key; the second run gets the charge
// back without running it, and commits the rest with the result.
func TestTxStepsInDo(t *testing.T) {
	t.Parallel()
	s := newTestTxStore(t)
	charges := 0
	job := func(fail bool) func(ctx context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			ch, err := idempotency.Step(ctx, "charge", func(ctx context.Context) (string, error) {
				charges++
				return "ch_1", s.writeLedger(ctx, "job:charge")
			})
			if err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("the email could not be sent") // released: the job runs again
			}
			return []byte(ch), s.writeLedger(ctx, "job:done")
		}
	}
	_, err := idempotency.Do(context.Background(), s, "job", job(true))
	require.ErrorContains(t, err, "the email could not be sent")
	assert.Equal(t, []string{"job:charge"}, s.ledgerRows(t), "the step's row stays, committed with its point")

	result, err := idempotency.Do(context.Background(), s, "job", job(false))
	require.NoError(t, err)
	assert.Equal(t, "ch_1", string(result))
	assert.Equal(t, 1, charges, "the second run got the charge back")
	assert.ElementsMatch(t, []string{"job:charge", "job:done"}, s.ledgerRows(t))
}
