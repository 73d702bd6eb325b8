package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// ErrStepsUnsupported is returned by Step, which then does not run its fn,
// in a run whose store keeps no steps (no store.StepStore), or that runs
// in the claim's transaction of a store whose steps cannot join it (no
// store.TxStepStore).
var ErrStepsUnsupported = errors.New("idempotency: this run's store keeps no steps")

// ErrStepMisused is wrapped by Step's error, fn not run, for a name that
// is empty or was used already in the same run, and for a Step called once
// the handler wrote its response's status or its run ended.
var ErrStepMisused = errors.New("idempotency: step misused")

// Step runs fn as the step called name of the request or Do job that ctx
// runs under, unless an earlier run of the same request recorded that
// step: then it returns the recorded result, or the recorded final error,
// without running fn. A result fn returns with a nil error is recorded,
// as JSON, before Step returns; an error is returned unrecorded (the step
// runs again next time) unless marked Final, which is recorded too.
//
// Record each side effect that must not be repeated (a charge, an email)
// in a step of its own, and call steps in the same order on every run,
// before writing the response. Past store.MaxSteps steps or
// store.MaxStepBytes of result, Step returns an error wrapping
// store.ErrStepLimit (fn not run past MaxSteps). A step whose result the
// store refused or failed to record returns the result with the error
// (wrapping ErrLeaseLost when another run holds the key now); the run
// should then fail, and its step runs again on the next one. Outside a
// claimed key, Step just calls fn. In a claim's transaction (a
// store.TxStepStore), fn's ctx carries a transaction of the step's own,
// which commits with the recorded result, or rolls back on an error.
//
// A POST or PATCH that fn sends through NewTransport without a key of its
// own carries the step's: FromContext(ctx).Derive(name) for the first,
// Derive(name+"#2") for the second and so on, the same on every run of
// the step (a takeover's too), so a provider that honours keys runs it
// once.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	x, ok := ctx.Value(callKey{}).(*callContext)
	if !ok {
		return fn(ctx)
	}
	s := &x.steps
	recorded, err := s.begin(name)
	if err != nil {
		return zero, err
	}
	if recorded != nil {
		return recordedResult[T](recorded)
	}
	stepCtx, stx, err := s.beginTx(ctx, name)
	if err != nil {
		return zero, err
	}
	if stx != nil {
		defer func() {
			if p := recover(); p != nil { // fn panicked: its transaction must not stay open
				s.rollback(ctx, stx)
				panic(p)
			}
		}()
	}
	v, err := fn(&stepContext{Context: stepCtx, key: x.key(), name: name})
	var step store.Step
	switch {
	case err != nil && !IsFinal(err):
		s.rollback(ctx, stx)
		return v, err
	case err != nil:
		// A final error's writes are undone; its record is saved alone.
		s.rollback(ctx, stx)
		stx = nil
		step = store.Step{Name: name, Result: []byte(err.Error()), Failed: true}
	default:
		result, merr := json.Marshal(v)
		if merr != nil {
			s.rollback(ctx, stx)
			return v, fmt.Errorf("idempotency: step %q: encoding its result: %w", name, merr)
		}
		step = store.Step{Name: name, Result: result}
	}
	if serr := s.save(ctx, x.c.key, step, stx); serr != nil {
		return v, errors.Join(serr, err)
	}
	return v, err
}

// recordedResult returns what a recorded step returned.
func recordedResult[T any](step *store.Step) (T, error) {
	var v T
	if step.Failed {
		return v, Final(errors.New(string(step.Result)))
	}
	if err := json.Unmarshal(step.Result, &v); err != nil {
		return v, fmt.Errorf("idempotency: step %q: decoding its recorded result: %w", step.Name, err)
	}
	return v, nil
}

// stepContext is the context of a running step's fn: the keys of the
// POST and PATCH requests it sends through NewTransport derive from the
// step's name (stepKey), so every run of the step sends the same ones.
type stepContext struct {
	context.Context
	key  Key
	name string
	sent atomic.Int32
}

type stepContextKey struct{}

func (x *stepContext) Value(key any) any {
	if key == (stepContextKey{}) {
		return x
	}
	return x.Context.Value(key)
}

// stepKey returns the Idempotency-Key of the next request sent with ctx,
// and true, when ctx is a running step's: key.Derive(name) for the step's
// first request, key.Derive(name+"#2") for its second, and so on.
func stepKey(ctx context.Context) (string, bool) {
	x, ok := ctx.Value(stepContextKey{}).(*stepContext)
	if !ok {
		return "", false
	}
	name := x.name
	if n := x.sent.Add(1); n > 1 {
		name += "#" + strconv.Itoa(int(n))
	}
	return x.key.Derive(name), true
}

// stepRun is the steps of one run of a claimed key. It lives in the run's
// callContext, so a run that calls no Step pays for none.
type stepRun struct {
	store    store.StepStore // nil: Step returns ErrStepsUnsupported
	owner    store.Lease
	recorded []store.Step  // by earlier runs, as the claim returned them
	timeout  time.Duration // of each SaveStep, with its resends
	// written's Status is that of the handler's response, 0 until written;
	// nil for a Do job.
	written interface{ Status() int }

	inTx *txSteps // nil outside a claim's transaction

	mu    sync.Mutex
	used  []string // names begun in this run
	saved int      // steps this run recorded
	ended bool
}

// start makes s the steps of a run of a key claimed for owner, whose
// claim returned recorded; a nil st leaves s refusing every step.
func (s *stepRun) start(st store.StepStore, owner store.Lease, recorded []store.Step, timeout time.Duration, written interface{ Status() int }) {
	s.store, s.owner, s.recorded, s.timeout, s.written = st, owner, recorded, timeout, written
}

// startInTx makes s the steps of a run in tx, a claim's transaction of st,
// whose first step calls committed once it has committed the claim.
func (s *stepRun) startInTx(st store.TxStepStore, tx store.Tx, owner store.Lease, recorded []store.Step, lease, timeout time.Duration, written interface{ Status() int }, committed func()) {
	s.start(st, owner, recorded, timeout, written)
	s.inTx = &txSteps{store: st, tx: tx, lease: lease, committed: committed}
}

// txSteps is what a run in a claim's transaction needs for its steps.
type txSteps struct {
	store     store.TxStepStore
	tx        store.Tx
	lease     time.Duration
	committed func()

	// mu is held from a step's BeginStep until its transaction ends: the
	// steps of one run in a claim's transaction run one at a time, and a
	// step begun meanwhile (nested, or from another goroutine) is refused.
	mu      sync.Mutex
	durable bool // the claim is committed
}

// beginTx opens the transaction of step name when the run is in a claim's
// transaction, and returns the context carrying it; otherwise it returns
// ctx and a nil StepTx.
func (s *stepRun) beginTx(ctx context.Context, name string) (context.Context, store.StepTx, error) {
	t := s.inTx
	if t == nil {
		return ctx, nil, nil
	}
	if !t.mu.TryLock() {
		return ctx, nil, fmt.Errorf("%w: step %q begun while another step of the run is running, in a claim's transaction", ErrStepMisused, name)
	}
	stepCtx, stx, err := t.store.BeginStep(ctx, t.tx, s.owner, t.lease)
	if err != nil {
		t.mu.Unlock()
		return ctx, nil, fmt.Errorf("idempotency: step %q: %w", name, err)
	}
	if !t.durable {
		t.durable = true
		t.committed()
	}
	return stepCtx, stx, nil
}

// rollback undoes a step's transaction, if it has one.
func (s *stepRun) rollback(ctx context.Context, stx store.StepTx) {
	if stx == nil {
		return
	}
	rctx := newDetachedDeadline(ctx, s.timeout)
	_ = stx.Rollback(rctx) // a failed rollback ends the connection, which ends the transaction
	rctx.stop()
	s.inTx.mu.Unlock()
}

// end refuses every later Step: the run is over.
func (s *stepRun) end() {
	if s.store == nil {
		return
	}
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// begin takes name for a step of this run and returns its recorded step,
// if an earlier run recorded it, or an error if it may not run.
func (s *stepRun) begin(name string) (*store.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.store == nil:
		return nil, fmt.Errorf("%w: step %q", ErrStepsUnsupported, name)
	case name == "":
		return nil, fmt.Errorf("%w: a step needs a name", ErrStepMisused)
	case s.ended || s.written != nil && s.written.Status() != 0:
		return nil, fmt.Errorf("%w: step %q after the response was written or the run ended", ErrStepMisused, name)
	case slices.Contains(s.used, name):
		return nil, fmt.Errorf("%w: step %q run twice in one run", ErrStepMisused, name)
	}
	s.used = append(s.used, name)
	for i := range s.recorded {
		if s.recorded[i].Name == name {
			return &s.recorded[i], nil
		}
	}
	if n := len(s.recorded) + s.saved; n >= store.MaxSteps {
		return nil, store.CheckStep(n, store.Step{Name: name})
	}
	return nil, nil
}

// save records step for the run's owner, in stx when it has one. Like the
// run's outcome, it outlives a client gone meanwhile, the step's work being
// done; outside a transaction it is sent again on connection errors.
func (s *stepRun) save(ctx context.Context, key string, step store.Step, stx store.StepTx) error {
	if err := store.CheckStep(0, step); err != nil {
		s.rollback(ctx, stx)
		return fmt.Errorf("idempotency: %w", err)
	}
	rctx := newDetachedDeadline(ctx, s.timeout)
	var err error
	if stx != nil {
		err = stx.Commit(rctx, step)
		s.inTx.mu.Unlock()
	} else {
		err = resend(rctx, func(ctx context.Context) error { return s.store.SaveStep(ctx, key, s.owner, step) })
	}
	rctx.stop()
	switch {
	case errors.Is(err, store.ErrNotOwner):
		return fmt.Errorf("%w: step %q: %w", ErrLeaseLost, step.Name, err)
	case err != nil:
		return fmt.Errorf("idempotency: step %q: %w", step.Name, err)
	}
	s.mu.Lock()
	s.saved++
	s.mu.Unlock()
	return nil
}
