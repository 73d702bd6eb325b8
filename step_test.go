package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// charge is what a payment's first step returns.
type charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// stepPayment is a handler of two steps, charge and ledger, that fails
// with 500 after its charge while failAfterCharge runs are left: as a
// handler whose ledger write failed, the key is released for a retry.
type stepPayment struct {
	charges, ledgers atomic.Int32
	failAfterCharge  atomic.Int32
}

func (h *stepPayment) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := idempotency.Step(r.Context(), "charge", func(context.Context) (charge, error) {
		n := h.charges.Add(1)
		return charge{ID: fmt.Sprint("ch_", n), Amount: 1250}, nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if h.failAfterCharge.Add(-1) >= 0 {
		http.Error(w, "ledger down", http.StatusInternalServerError)
		return
	}
	row, err := idempotency.Step(r.Context(), "ledger", func(context.Context) (int32, error) {
		return h.ledgers.Add(1), nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"charge": c.ID, "row": row})
}

// TestStepResumesAfterAFailedRun: a run that failed after its charge step
// is retried without charging again, the retry gets the first charge's
// result, and its later steps run once.
func TestStepResumesAfterAFailedRun(t *testing.T) {
	h := &stepPayment{}
	h.failAfterCharge.Store(2)
	mw := idempotency.New()(h)
	for range 2 {
		require.Equal(t, http.StatusInternalServerError, post(mw, "k", "{}").StatusCode)
	}
	resp := post(mw, "k", "{}")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.JSONEq(t, `{"charge":"ch_1","row":1}`, readAll(t, resp))
	replay := post(mw, "k", "{}")
	assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, int32(1), h.charges.Load(), "charges")
	assert.Equal(t, int32(1), h.ledgers.Load(), "ledger rows")
}

// TestStepRacingDuplicatesChargeOnce: many clients send one payment at
// once and retry until it is recorded, while its first runs fail after
// charging: the card is charged once, and every client gets one body.
func TestStepRacingDuplicatesChargeOnce(t *testing.T) {
	const clients = 32
	h := &stepPayment{}
	h.failAfterCharge.Store(5)
	mw := idempotency.New()(h)
	bodies := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				resp := post(mw, "k", "{}")
				if resp.StatusCode == http.StatusCreated {
					bodies[i] = readAll(t, resp)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i := range clients {
		require.JSONEq(t, `{"charge":"ch_1","row":1}`, bodies[i], "client %d", i)
	}
	assert.Equal(t, int32(1), h.charges.Load(), "charges")
	assert.Equal(t, int32(1), h.ledgers.Load(), "ledger rows")
}

// TestStepResumesAfterATakeover: a job whose owner died after its first
// step (its lease lapsed, never released) is taken over by the next
// caller, which gets the step's result without running it.
func TestStepResumesAfterATakeover(t *testing.T) {
	m := store.NewMemory()
	key := idempotency.DoStorageKey("", "job")
	rec, claimed, err := m.Claim(t.Context(), key, "job-v1", "dead-owner", 100*time.Millisecond)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, m.SaveStep(t.Context(), key, rec.Owner, store.Step{Name: "charge", Result: []byte(`{"id":"ch_dead","amount":5}`)}))
	time.Sleep(200 * time.Millisecond)

	var charges atomic.Int32
	result, err := idempotency.Do(t.Context(), m, "job", func(ctx context.Context) ([]byte, error) {
		c, err := idempotency.Step(ctx, "charge", func(context.Context) (charge, error) {
			charges.Add(1)
			return charge{ID: "ch_new"}, nil
		})
		return []byte(c.ID), err
	}, idempotency.DoFingerprint("job-v1"))
	require.NoError(t, err)
	assert.Equal(t, "ch_dead", string(result))
	assert.Zero(t, charges.Load(), "charges after the takeover")
}

// TestStepFinalErrorIsRecorded: a step's error marked Final is recorded,
// and the next run gets it back without running the step; an error not
// marked so is not, and the step runs again.
func TestStepFinalErrorIsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		runs      int32
		wantFinal bool
	}{
		{"final", idempotency.Final(errors.New("card declined")), 1, true},
		{"not final", errors.New("provider timed out"), 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := store.NewMemory()
			var runs atomic.Int32
			var stepErr error
			job := func(ctx context.Context) ([]byte, error) {
				_, stepErr = idempotency.Step(ctx, "charge", func(context.Context) (charge, error) {
					runs.Add(1)
					return charge{}, tc.err
				})
				return nil, fmt.Errorf("payment failed: %v", stepErr) // not final: the key is released
			}
			for range 2 {
				_, err := idempotency.Do(t.Context(), m, "job", job)
				require.ErrorContains(t, err, tc.err.Error())
				require.Error(t, stepErr)
				assert.Equal(t, tc.err.Error(), stepErr.Error())
				assert.Equal(t, tc.wantFinal, idempotency.IsFinal(stepErr), "IsFinal(%v)", stepErr)
			}
			assert.Equal(t, tc.runs, runs.Load(), "runs of the step")
		})
	}
}

// TestStepMisuse: a step refused for its misuse does not run, and says
// why in an error wrapping its sentinel.
func TestStepMisuse(t *testing.T) {
	var ran atomic.Int32
	noop := func(context.Context) (int, error) { return int(ran.Add(1)), nil }
	for _, tc := range []struct {
		name  string
		store store.Store
		steps func(ctx context.Context) error // returns the refused step's error
		want  error
		ran   int32 // the steps that ran: none refused
	}{
		{"a name used twice", store.NewMemory(), func(ctx context.Context) error {
			_, _ = idempotency.Step(ctx, "charge", noop)
			_, err := idempotency.Step(ctx, "charge", noop)
			return err
		}, idempotency.ErrStepMisused, 1},
		{"an empty name", store.NewMemory(), func(ctx context.Context) error {
			_, err := idempotency.Step(ctx, "", noop)
			return err
		}, idempotency.ErrStepMisused, 0},
		{"a store without steps", storeWithoutSteps{store.NewMemory()}, func(ctx context.Context) error {
			_, err := idempotency.Step(ctx, "charge", noop)
			return err
		}, idempotency.ErrStepsUnsupported, 0},
		{"a transactional store", &txMemory{Memory: store.NewMemory()}, func(ctx context.Context) error {
			_, err := idempotency.Step(ctx, "charge", noop)
			return err
		}, idempotency.ErrStepsUnsupported, 0},
		{"past MaxSteps", store.NewMemory(), func(ctx context.Context) error {
			for i := range store.MaxSteps {
				if _, err := idempotency.Step(ctx, fmt.Sprint("step-", i), noop); err != nil {
					return fmt.Errorf("step %d of %d: %w", i, store.MaxSteps, err)
				}
			}
			_, err := idempotency.Step(ctx, "one-too-many", noop)
			return err
		}, store.ErrStepLimit, store.MaxSteps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran.Store(0)
			var refused error
			_, err := idempotency.Do(t.Context(), tc.store, "job", func(ctx context.Context) ([]byte, error) {
				refused = tc.steps(ctx)
				return nil, nil
			})
			require.NoError(t, err)
			require.ErrorIs(t, refused, tc.want)
			assert.Equal(t, tc.ran, ran.Load(), "steps run")
		})
	}
}

// TestStepAfterTheResponse: a Step called once the handler wrote its
// status, or from a goroutine after the handler returned, is refused
// without running.
func TestStepAfterTheResponse(t *testing.T) {
	var ran atomic.Int32
	step := func(ctx context.Context) error {
		_, err := idempotency.Step(ctx, "late", func(context.Context) (int, error) { return int(ran.Add(1)), nil })
		return err
	}
	afterWrite := make(chan error, 1)
	later := make(chan context.Context, 1)
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		afterWrite <- step(r.Context())
		later <- r.Context()
	}))
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	require.ErrorIs(t, <-afterWrite, idempotency.ErrStepMisused, "a step after WriteHeader")
	require.ErrorIs(t, step(<-later), idempotency.ErrStepMisused, "a step after the run")
	assert.Zero(t, ran.Load())
}

// TestStepResultOverTheBound: a step whose result encodes past
// store.MaxStepBytes returns it with an error wrapping ErrStepLimit, and
// the run that ignores it records nothing of the step.
func TestStepResultOverTheBound(t *testing.T) {
	m := store.NewMemory()
	big := strings.Repeat("x", store.MaxStepBytes)
	var runs atomic.Int32
	job := func(ctx context.Context) ([]byte, error) {
		v, err := idempotency.Step(ctx, "big", func(context.Context) (string, error) { runs.Add(1); return big, nil })
		require.Equal(t, big, v, "the result comes back with the error")
		return nil, err
	}
	for range 2 {
		_, err := idempotency.Do(t.Context(), m, "job", job)
		require.ErrorIs(t, err, store.ErrStepLimit)
	}
	assert.Equal(t, int32(2), runs.Load(), "an unrecorded step runs again")
}

// TestStepLostLease: a step whose run lost the key (an operator deleted
// it, forced) is not recorded, and its error wraps ErrLeaseLost.
func TestStepLostLease(t *testing.T) {
	m := store.NewMemory()
	_, err := idempotency.Do(t.Context(), m, "job", func(ctx context.Context) ([]byte, error) {
		deleted, err := m.Delete(ctx, store.HashKey(idempotency.DoStorageKey("", "job")), true)
		require.NoError(t, err)
		require.True(t, deleted)
		_, err = idempotency.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		return nil, err
	})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
}

// TestStepOutsideAClaimedKey: a request without a key runs its steps as
// plain calls.
func TestStepOutsideAClaimedKey(t *testing.T) {
	h := &stepPayment{}
	mw := idempotency.New()(h)
	for range 2 {
		require.Equal(t, http.StatusCreated, post(mw, "", "{}").StatusCode)
	}
	assert.Equal(t, int32(2), h.charges.Load())
}

// storeWithoutSteps is a store that keeps no steps.
type storeWithoutSteps struct{ store.Store }
