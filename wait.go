package idempotency

import (
	"context"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// waitPolls paces the looks of WithWait and DoWait at an in-flight key.
var waitPolls = backoff{first: 10 * time.Millisecond, max: 250 * time.Millisecond}

// waitForRecord waits on an in-flight key until it completes (replay), is
// released or lapses (this request claims it), or the wait or the
// request's context ends (409). A failed look gets 503 (see storeFailed).
func (m *middleware) waitForRecord(w http.ResponseWriter, r *http.Request, c *call, token string) {
	c.waiting, c.waitStart = true, now()
	switch waitPolls.poll(r.Context(), m.wait, m.store, m.storeTimeout, c.key, func() bool { return m.tryClaim(w, r, c, token) }) {
	case polledDone:
		return
	case polledInterrupted:
		m.waitEnded(r, c, WaitInterrupted)
	case polledTimedOut:
		m.waitEnded(r, c, WaitTimedOut)
	}
	m.writeRetryableProblem(w, r, problemKeyInFlight)
	m.decided(r, c, OutcomeKeyInFlight)
}

type pollEnd int

const (
	polledDone        pollEnd = iota // try reported done
	polledTimedOut                   // the wait lasted its whole time
	polledInterrupted                // ctx ended
)

// backoff paces a waiting loop: first, then doubling up to max.
type backoff struct{ first, max time.Duration }

// poll calls try each time key may have changed, until try reports done,
// wait passes, or ctx ends; the caller looked once before. With a
// store.Watcher, each look comes after a watch has started, so no later
// change goes unseen; each round's watch starts before the last stops, so
// a shared subscription survives. The timer covers lost wake-ups, lapsed
// leases and failed watches: b.first at first (a change between the
// caller's look and the watch may go unseen), then b.max with a watch,
// doubling without. ctx is checked
// whatever woke the loop: a caller whose context ended must not claim. A
// wake-up that finds the key still in flight delays the next look
// (firstHold, doubling to b.max), so watches that keep firing cannot
// busy-loop.
func (b backoff) poll(ctx context.Context, wait time.Duration, s store.Store, storeTimeout time.Duration, key string, try func() bool) pollEnd {
	watcher, _ := s.(store.Watcher)
	deadline := time.Now().Add(wait)
	watchCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	interval := min(b.first, wait)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	w := startWatch(watchCtx, watcher, storeTimeout, key)
	defer func() { w.end() }() // even if try panics
	var hold time.Duration
	for {
		woken := false
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-w.changed:
			woken = true
		}
		if woken && hold > 0 {
			pause(ctx, min(hold, time.Until(deadline)))
		}
		if ctx.Err() != nil {
			return polledInterrupted
		}
		next := startWatch(watchCtx, watcher, storeTimeout, key)
		w.end()
		w = next
		if try() {
			return polledDone
		}
		if woken {
			hold = min(max(2*hold, firstHold), b.max)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return polledTimedOut
		}
		interval = 2 * interval
		if w.changed != nil {
			interval = b.max
		}
		interval = min(interval, b.max, left)
		timer.Reset(interval)
	}
}

const firstHold = time.Millisecond

func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// watch is one round's watch of a key; the zero watch never wakes.
type watch struct {
	changed  <-chan struct{}
	stop     func()
	deadline *storeDeadline
}

// startWatch watches key in s, if not nil, giving Watch timeout to start
// (none if 0).
func startWatch(ctx context.Context, s store.Watcher, timeout time.Duration, key string) watch {
	if s == nil {
		return watch{}
	}
	ctx, deadline := withStoreDeadline(ctx, timeout)
	changed, stop, err := s.Watch(ctx, key)
	switch {
	case err != nil:
		deadline.end()
		return watch{} // the timer polls this round
	case !deadline.keep():
		stop()
		return watch{}
	}
	return watch{changed: changed, stop: stop, deadline: deadline}
}

// end stops w; it may be called again.
func (w *watch) end() {
	if w.stop != nil {
		w.stop()
		w.deadline.end()
	}
	*w = watch{}
}
