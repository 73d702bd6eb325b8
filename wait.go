package idempotency

import (
	"context"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// waitPolls is when a request waiting on an in-flight key (WithWait, and
// Do's DoWait) looks at it again without a wake-up.
var waitPolls = backoff{first: 10 * time.Millisecond, max: 250 * time.Millisecond}

// waitForRecord waits for the key of a request whose duplicate is in
// flight until it completes (replay), is released or lapses (this request
// claims it and runs), or the wait times out (409). The request's own
// context ending (its deadline, or its client hanging up) ends the wait as
// a timeout does, with 409. A look the store fails gets 503, never the
// handler run unprotected (see storeFailed).
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

// How a poll ended.
type pollEnd int

const (
	polledDone        pollEnd = iota // try reported done
	polledTimedOut                   // the wait lasted its whole time
	polledInterrupted                // ctx ended
)

// backoff is when a waiting loop looks at its key again if nothing wakes
// it: after first, then at intervals doubling up to max.
type backoff struct{ first, max time.Duration }

// poll calls try, which looks at key in s, each time key may have changed,
// until try reports done, wait has passed, or ctx ends; the caller has
// looked once before poll. If s is a store.Watcher, each look comes after
// a watch of key has started (or failed to within storeTimeout), so that
// no change after the look goes unseen, and the watch lasts until the next
// wake-up: through the try, and so through the handler's or fn's run if
// the try claims the key. Each
// round's watch starts before the last one stops, so that a store that
// shares one subscription among a key's watches keeps it. A watch ends
// with the wait at the latest. A timer following b is the fallback: for a
// wake-up that never comes, and for a round whose Watch failed. ctx is
// checked whichever woke the loop: when several were ready, select may
// have taken another, and a caller whose context ended must not claim.
//
// The first wait is b.first even with a watch: the caller's look came
// before the watch, and a store that cannot tell at once that the key has
// left the flight (one that subscribes, say) misses a change in between.
// After that, a round with a watch waits b.max: only a lost wake-up (a
// dropped connection) or a lease that lapsed without a release is left for
// the timer, and b.max bounds how late either is noticed, as it does for a
// loop that only polls. A round without a watch doubles the interval.
//
// A wake-up after which try finds the key still in flight (another waiter
// claimed it first, or a store woke its watches for a dropped connection)
// makes the next wake-up wait a little before its look: firstHold, then
// twice as long each time it happens again, up to b.max, so that a store
// whose watches keep firing at once cannot turn the wait into a busy loop.
func (b backoff) poll(ctx context.Context, wait time.Duration, s store.Store, storeTimeout time.Duration, key string, try func() bool) pollEnd {
	watcher, _ := s.(store.Watcher)
	deadline := time.Now().Add(wait)
	watchCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	interval := min(b.first, wait)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	w := startWatch(watchCtx, watcher, storeTimeout, key)
	defer func() { w.end() }() // the last watch, even if try panics
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

// firstHold is how long a waiting loop first waits after a wake-up that
// found its key still in flight (see poll).
const firstHold = time.Millisecond

// pause waits for d to pass or ctx to end, whichever comes first.
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

// watch is one round's watch of a waiting loop's key. The zero watch, of
// a store that cannot watch or whose Watch failed, never wakes.
type watch struct {
	changed  <-chan struct{}
	stop     func()
	deadline *storeDeadline // the watch's context, kept
}

// startWatch starts watching key in s, if s is not nil, giving Watch
// timeout to start it (none if 0).
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

// end stops w, unless it has ended: it may be called again.
func (w *watch) end() {
	if w.stop != nil {
		w.stop()
		w.deadline.end()
	}
	*w = watch{}
}
