package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// renewal keeps a claimed key's lease alive while its handler runs: every
// third of the lease it renews the lease, checking ownership. If the store
// says the lease was lost (taken over after a long store outage), renewal
// stops and the error handler is told; the handler's outcome will then be
// refused by the store rather than overwrite the new owner's record.
type renewal struct {
	m     *middleware
	r     *http.Request
	key   string
	owner store.Lease
	every time.Duration

	mu      sync.Mutex // held during a renewal, so stop waits for it
	stopped bool
	timer   *time.Timer
}

func (m *middleware) startRenewal(r *http.Request, key string, owner store.Lease) *renewal {
	rn := &renewal{m: m, r: r, key: key, owner: owner, every: m.lease / 3}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.timer = time.AfterFunc(rn.every, rn.renew)
	return rn
}

// renew renews the lease once and schedules the next renewal.
func (rn *renewal) renew() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rn.r.Context()), rn.every)
	err := rn.m.store.Renew(ctx, rn.key, rn.owner, rn.m.lease)
	cancel()
	switch {
	case errors.Is(err, store.ErrNotOwner):
		rn.m.errorHandler(rn.r, fmt.Errorf("idempotency: lease lost while the handler ran: %w", err))
		return
	case err != nil:
		rn.m.errorHandler(rn.r, fmt.Errorf("idempotency: renew: %w", err))
	}
	rn.timer.Reset(rn.every)
}

// stop ends the renewals; when it returns, no renewal is running or will run.
func (rn *renewal) stop() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.stopped = true
	rn.timer.Stop()
}
