package idempotency

import (
	"context"
	"net/http"
	"time"
)

// Polling bounds for a request waiting on an in-flight key (WithWait).
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// waitForRecord polls the key of a request whose duplicate is in flight
// until it completes (replay), is released or lapses (this request claims
// it and runs), or the wait times out (409). The request's own context
// ending (its deadline, or its client hanging up) ends the wait as a
// timeout does, with 409. A poll the store fails gets 503, never the
// handler run unprotected (see storeFailed).
func (m *middleware) waitForRecord(w http.ResponseWriter, r *http.Request, c *call, token string) {
	c.waiting, c.waitStart = true, now()
	switch poll(r.Context(), m.wait, func() bool { return m.tryClaim(w, r, c, token) }) {
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

// poll calls try after firstPoll, then at intervals doubling up to maxPoll,
// until try reports done, wait has passed, or ctx ends. ctx is checked
// whichever woke the loop: when both were ready, select may have taken the
// timer, and a caller whose context ended must not claim.
func poll(ctx context.Context, wait time.Duration, try func() bool) pollEnd {
	deadline := time.Now().Add(wait)
	interval := min(firstPoll, wait)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		if ctx.Err() != nil {
			return polledInterrupted
		}
		if try() {
			return polledDone
		}
		left := time.Until(deadline)
		if left <= 0 {
			return polledTimedOut
		}
		interval = min(2*interval, maxPoll, left)
		timer.Reset(interval)
	}
}
