package idempotency

import (
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
	deadline := time.Now().Add(m.wait)
	poll := min(firstPoll, m.wait)
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		select {
		case <-r.Context().Done():
		case <-timer.C:
		}
		// Checked whichever woke the loop: when both were ready, select may
		// have taken the timer, and an ended request must not claim.
		if r.Context().Err() != nil {
			m.waitEnded(r, c, WaitInterrupted)
			m.writeRetryableProblem(w, r, problemKeyInFlight)
			m.decided(r, c, OutcomeKeyInFlight)
			return
		}
		if m.tryClaim(w, r, c, token) {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			m.waitEnded(r, c, WaitTimedOut)
			m.writeRetryableProblem(w, r, problemKeyInFlight)
			m.decided(r, c, OutcomeKeyInFlight)
			return
		}
		poll = min(2*poll, maxPoll, left)
		timer.Reset(poll)
	}
}
