package idempotency

import (
	"context"
	"sync"
	"time"
)

// detachedDeadline is the context of a store call that records an outcome:
// its parent's values without its cancellation, so a client that leaves
// cannot leave its key claimed, and a deadline of its own. The timer starts
// only on Done or Err, so a store that never looks costs none.
type detachedDeadline struct {
	context.Context // context.WithoutCancel of the request's
	deadline        time.Time

	mu    sync.Mutex
	done  chan struct{} // made by arm
	err   error
	timer *time.Timer
}

// newDetachedDeadline returns a detachedDeadline ending timeout from now.
// The caller must call stop.
func newDetachedDeadline(parent context.Context, timeout time.Duration) *detachedDeadline {
	c := new(detachedDeadline)
	c.init(parent, timeout)
	return c
}

// init sets up a zero c as newDetachedDeadline does.
func (c *detachedDeadline) init(parent context.Context, timeout time.Duration) {
	c.Context, c.deadline = context.WithoutCancel(parent), time.Now().Add(timeout)
}

func (c *detachedDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *detachedDeadline) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arm()
	return c.done
}

func (c *detachedDeadline) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arm()
	return c.err
}

// arm makes the done channel and its timer, once. c.mu must be held.
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

// end closes the done channel with err, once. c.mu must be held and the
// channel made.
func (c *detachedDeadline) end(err error) {
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// stop ends c when its store call returns: the timer stops and derived
// contexts see it cancelled.
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
