package idempotency

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// storeDeadline is the context of a store call that claims or looks at a key:
// its parent's, ending at the store timeout too. A call whose result outlives
// it (a transaction, a watch) keeps it, and it then ends only with its
// parent.
type storeDeadline struct {
	context.Context // cancelled by end, or at the deadline
	deadline        time.Time
	timeout         time.Duration
	timer           *time.Timer
	cancel          context.CancelCauseFunc
	kept            atomic.Bool
}

// withStoreDeadline returns parent with a deadline timeout from now (for 0,
// parent and nil); call end or keep on d when the store call returns.
func withStoreDeadline(parent context.Context, timeout time.Duration) (ctx context.Context, d *storeDeadline) {
	if timeout == 0 {
		return parent, nil
	}
	cancelled, cancel := context.WithCancelCause(parent)
	d = &storeDeadline{Context: cancelled, deadline: time.Now().Add(timeout), timeout: timeout, cancel: cancel}
	d.timer = time.AfterFunc(timeout, func() { cancel(context.DeadlineExceeded) })
	return d, d
}

// Deadline is the earlier of the store deadline and the parent's, or once
// kept, the parent's.
func (d *storeDeadline) Deadline() (time.Time, bool) {
	parent, ok := d.Context.Deadline()
	if d.kept.Load() || ok && parent.Before(d.deadline) {
		return parent, ok
	}
	return d.deadline, true
}

// Err reports context.DeadlineExceeded once the store timeout has passed.
func (d *storeDeadline) Err() error {
	err := d.Context.Err()
	if err != nil && errors.Is(context.Cause(d.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

func (d *storeDeadline) end() {
	if d == nil {
		return
	}
	d.timer.Stop()
	d.cancel(nil)
}

// keep lifts the store deadline, or reports false if it had passed: the call
// is then judged timed out.
func (d *storeDeadline) keep() bool {
	if d == nil {
		return true
	}
	if !d.timer.Stop() {
		return false
	}
	d.kept.Store(true)
	return true
}

// keepTx keeps d for tx, from BeginClaim, or ends d if there is none. A tx
// whose deadline passed first is rolled back: the claim timed out.
func (d *storeDeadline) keepTx(tx store.Tx, err error) (store.Tx, error) {
	switch {
	case tx == nil || err != nil:
		d.end()
		return tx, err
	case d.keep():
		return tx, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d), d.timeout)
	defer cancel()
	_ = tx.Rollback(ctx) // if it fails, the store ends the transaction with its connection
	return nil, context.DeadlineExceeded
}
