package idempotency

import (
	"context"
	"errors"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// DoObserver sets the observer of Do: o.Job is told of each call's outcome
// and how long fn ran, o.Lease of each renewal of fn's lease; the other
// functions are the middleware's. Defaults to none.
func DoObserver(o Observer) DoOption {
	return func(c *doConfig) { c.observer = &o }
}

// JobEvent is one call of Do. Its Outcome is one of:
//   - executed: fn ran; its result, or its Final error, was stored;
//   - released: fn ran; its outcome was not kept (an error, a panic,
//     DoNotRecord, a lost lease), so the job may run again;
//   - replayed: a stored result or Final error was returned;
//   - key_in_flight: ErrInFlight, at once or after DoWait;
//   - key_reused: ErrKeyReused;
//   - not_replayable: ErrNotStored;
//   - record_sealed: ErrRecordSealed (DoSealer);
//   - store_unavailable: the claim failed, or the record after fn ran.
type JobEvent struct {
	Outcome Outcome
	// Ran is whether fn ran, and Duration how long.
	Ran      bool
	Duration time.Duration
}

// observation is what one call of Do tells its observer.
type observation struct {
	outcome Outcome
	ran     bool
	took    time.Duration
}

func (j *job) decided(outcome Outcome) {
	if j.observation != nil {
		j.outcome = outcome
	}
}

func (j *job) fnStart() time.Time {
	if j.observation == nil {
		return time.Time{}
	}
	return time.Now()
}

func (j *job) fnReturned(started time.Time) {
	if j.observation != nil {
		j.ran, j.took = true, time.Since(started)
	}
}

// recordedOutcome is the outcome of a run whose result's record returned
// err.
func recordedOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeExecuted
	case errors.Is(err, store.ErrNotOwner):
		return OutcomeReleased
	}
	return OutcomeStoreUnavailable
}

func (j *job) observed(ctx context.Context) {
	j.cfg.observer.Job(ctx, JobEvent{Outcome: j.outcome, Ran: j.ran, Duration: j.took})
}

func (r *jobRun) renewalDone(ctx context.Context, _ time.Duration, err error) {
	if o := r.j.cfg.observer; o != nil && o.Lease != nil {
		o.Lease(ctx, LeaseEvent{Result: leaseResult(err), Err: err})
	}
}
