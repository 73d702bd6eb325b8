package idempotency

import (
	"context"
	"sync"
	"time"
)

// detachedDeadline is the context of a store call that records an outcome
// (complete, release, commit, rollback): it keeps the values of the
// context it is made from but none of its cancellation, so that a client
// that goes away cannot leave its key claimed, and it has a deadline of its
// own, so that a store that stops answering holds the call no longer than
// that. Its timer starts only when the store asks for Done or Err: a store
// that never looks (the memory store) costs no timer at all.
type detachedDeadline struct {
	context.Context // detached from the request (context.WithoutCancel)
	deadline        time.Time

	mu    sync.Mutex
	done  chan struct{} // made by the first Done or Err
	err   error
	timer *time.Timer
}

// newDetachedDeadline returns a detachedDeadline with parent's values that
// ends timeout from now. The caller must call stop when the store call
// returns.
func newDetachedDeadline(parent context.Context, timeout time.Duration) *detachedDeadline {
	c := new(detachedDeadline)
	c.init(parent, timeout)
	return c
}

// init makes c, a zero detachedDeadline, one that newDetachedDeadline
// would return.
func (c *detachedDeadline) init(parent context.Context, timeout time.Duration) {
	c.Context, c.deadline = context.WithoutCancel(parent), time.Now().Add(timeout)
}

func (c *detachedDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel that is closed at the deadline, or by stop.
func (c *detachedDeadline) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arm()
	return c.done
}

// Err returns context.DeadlineExceeded once the deadline has passed,
// context.Canceled once stop has been called, and nil before.
func (c *detachedDeadline) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arm()
	return c.err
}

// arm makes the done channel and the timer that closes it, once; past the
// deadline it closes the channel at once. c.mu must be held.
func (c *detachedDeadline) arm() {
	if c.done != nil {
		return
	}
	c.done = make(chan struct{})
	left := time.Until(c.deadline)
	if left <= 0 {
		c.end(context.DeadlineExceeded)
		return
	}
	c.timer = time.AfterFunc(left, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.end(context.DeadlineExceeded)
	})
}

// end closes the done channel with err, unless it is closed already. c.mu
// must be held, and the channel made.
func (c *detachedDeadline) end(err error) {
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// stop ends c once its store call has returned: its timer, if it started
// one, is stopped, and anything still watching it (a context the store
// derived from it, say) sees it cancelled.
func (c *detachedDeadline) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.end(context.Canceled)
}
