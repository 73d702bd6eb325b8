package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// jobRun is what runs fn under a claimed key, in one allocation.
type jobRun struct {
	j      *job
	parent context.Context // Do's context
	c      call
	ctx    callContext
	lease  heldLease
	cancel context.CancelCauseFunc // ends fn's context when the lease is lost
}

// newRun returns the run of fn under owner's claim for Do's context ctx;
// fn's context derives from parent, and ends, with ErrLeaseLost as its
// cause, when the lease is lost.
func (j *job) newRun(ctx, parent context.Context, owner store.Lease) *jobRun {
	r := &jobRun{j: j, parent: ctx}
	r.c = call{key: j.key, clientKey: j.clientKey, fence: owner.Fence}
	var fnCtx context.Context
	fnCtx, r.cancel = context.WithCancelCause(parent)
	r.ctx = callContext{Context: fnCtx, c: &r.c}
	return r
}

// run runs fn, with the steps the claim returned, under its lease, renewed
// meanwhile, then records its outcome or releases the key; a panic
// releases it. A refused record or a lost lease gives an error wrapping
// ErrLeaseLost.
func (j *job) run(ctx context.Context, claim store.Record, claimedAt time.Time) ([]byte, error) {
	owner := claim.Owner
	r := j.newRun(ctx, ctx, owner)
	defer r.cancel(nil)
	if steps, ok := j.store.(store.StepStore); ok {
		r.ctx.steps.start(steps, owner, claim.Steps, cmp.Or(j.cfg.recordTimeout, j.cfg.lease), nil)
	}
	keeper := keepDoLease(j.cfg.lease, &r.lease, r, j.store, j.key, owner, claimedAt)
	decided := false
	started := j.fnStart()
	defer func() {
		if !decided { // fn panicked
			j.fnReturned(started)
			j.decided(OutcomeReleased)
			stopDoLease(keeper, &r.lease)
			r.release(owner)
		}
	}()
	result, err := j.fn(&r.ctx)
	r.ctx.steps.end()
	decided = true
	j.fnReturned(started)
	stopDoLease(keeper, &r.lease)

	resp := outcome(&r.ctx, result, err)
	if resp == nil {
		j.decided(OutcomeReleased)
		r.release(owner)
		if errors.Is(context.Cause(r.ctx.Context), ErrLeaseLost) {
			return nil, errors.Join(ErrLeaseLost, err)
		}
		return result, err
	}
	rctx := j.recordContext(ctx)
	stored := sealed(j.cfg.sealer, j.key, resp)
	cerr := resend(rctx, func(ctx context.Context) error {
		return j.store.Complete(ctx, j.key, owner, stored, j.cfg.retention)
	})
	rctx.stop()
	j.decided(recordedOutcome(cerr))
	switch {
	case errors.Is(cerr, store.ErrNotOwner):
		return nil, fmt.Errorf("%w: complete: %w", ErrLeaseLost, cerr)
	case cerr != nil:
		return nil, fmt.Errorf("idempotency: complete: %w", cerr)
	}
	return result, err
}

// release frees the key, if still owner's, so the job may run again.
func (r *jobRun) release(owner store.Lease) {
	ctx := r.j.recordContext(r.parent)
	defer ctx.stop()
	if err := resend(ctx, func(ctx context.Context) error { return r.j.store.Release(ctx, r.j.key, owner) }); err != nil {
		r.j.reportError(r.parent, owner.Fence, fmt.Errorf("idempotency: release: %w", err))
	}
}

func (r *jobRun) renewalContext() context.Context { return r.parent }

// renewalFailed reports a failed renewal; a lost lease then ends fn's
// context, with ErrLeaseLost as its cause, so the report comes before Do
// returns.
func (r *jobRun) renewalFailed(err error) {
	r.j.reportError(r.parent, r.c.fence, err)
	if errors.Is(err, store.ErrNotOwner) {
		r.cancel(ErrLeaseLost)
	}
}

// runInTx runs fn inside the claim's transaction, whose context is txCtx,
// then commits its outcome with fn's writes, or rolls both back. A panic
// of fn rolls back and goes on. With a store.TxStepStore, fn's steps are
// atomic phases: the first commits the claim, whose lease is renewed from
// then on, as run renews a plain claim's.
func (j *job) runInTx(ctx, txCtx context.Context, claim store.Record, tx store.Tx) ([]byte, error) {
	owner := claim.Owner
	r := j.newRun(ctx, txCtx, owner)
	defer r.cancel(nil)
	var keeper *leaseKeeper
	stopRenewing := func() {
		if keeper != nil {
			stopDoLease(keeper, &r.lease)
			keeper = nil
		}
	}
	if ts, ok := j.store.(store.TxStepStore); ok {
		r.ctx.steps.startInTx(ts, tx, owner, claim.Steps, j.cfg.lease, cmp.Or(j.cfg.recordTimeout, j.cfg.lease), nil,
			func() { keeper = keepDoLease(j.cfg.lease, &r.lease, r, j.store, j.key, owner, time.Now()) })
	}
	decided := false
	started := j.fnStart()
	defer func() {
		if !decided { // fn panicked
			j.fnReturned(started)
			j.decided(OutcomeReleased)
			stopRenewing()
			j.rollback(ctx, owner.Fence, tx)
		}
	}()
	result, err := j.fn(&r.ctx)
	r.ctx.steps.end()
	decided = true
	j.fnReturned(started)
	stopRenewing()

	resp := outcome(&r.ctx, result, err)
	if resp == nil {
		j.decided(OutcomeReleased)
		j.rollback(ctx, owner.Fence, tx)
		if errors.Is(context.Cause(r.ctx.Context), ErrLeaseLost) {
			return nil, errors.Join(ErrLeaseLost, err)
		}
		return result, err
	}
	rctx := j.recordContext(ctx)
	defer rctx.stop()
	cerr := tx.Commit(rctx, sealed(j.cfg.sealer, j.key, resp), j.cfg.retention)
	j.decided(recordedOutcome(cerr))
	if cerr != nil {
		return nil, fmt.Errorf("idempotency: commit: %w", cerr)
	}
	return result, err
}

// rollback abandons fn's transaction, its writes and the claim.
func (j *job) rollback(ctx context.Context, fence int64, tx store.Tx) {
	rctx := j.recordContext(ctx)
	defer rctx.stop()
	if err := tx.Rollback(rctx); err != nil {
		j.reportError(ctx, fence, fmt.Errorf("idempotency: rollback: %w", err))
	}
}
