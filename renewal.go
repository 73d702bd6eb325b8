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

// leaseKeeper renews the leases of the keys whose handlers are running, so
// that a handler may run far longer than one lease. One goroutine per
// middleware does the watching, and only while some lease is held: it wakes
// every sixth of the lease and renews, each in its own goroutine, every lease
// last renewed a third of the lease ago or more. Renewal checks ownership: if
// the store says the lease was lost (taken over after a long store outage),
// that lease is no longer renewed and the error handler is told; the
// handler's outcome will then be refused by the store rather than overwrite
// the new owner's record.
type leaseKeeper struct {
	m        *middleware
	mu       sync.Mutex
	held     map[*heldLease]struct{}
	watching bool
}

// heldLease is the lease of one running handler.
type heldLease struct {
	r     *http.Request
	key   string
	owner store.Lease

	mu        sync.Mutex // held during a renewal, so release waits for it
	renewing  bool       // guarded by leaseKeeper.mu
	renewedAt time.Time  // guarded by leaseKeeper.mu
	stopped   bool
}

// keep starts renewing owner's lease of key, tracked in l, until l is
// stopped.
func (k *leaseKeeper) keep(l *heldLease, r *http.Request, key string, owner store.Lease) {
	*l = heldLease{r: r, key: key, owner: owner, renewedAt: time.Now()}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[l] = struct{}{}
	if !k.watching {
		k.watching = true
		go k.watch()
	}
}

// stop ends the renewals of l; when it returns, none is running or will
// run.
func (k *leaseKeeper) stop(l *heldLease) {
	k.mu.Lock()
	delete(k.held, l)
	k.mu.Unlock()
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

// watch renews due leases until none is held.
func (k *leaseKeeper) watch() {
	every := k.m.lease / 3
	ticker := time.NewTicker(max(every/2, time.Millisecond))
	defer ticker.Stop()
	for now := range ticker.C {
		k.mu.Lock()
		if len(k.held) == 0 {
			k.watching = false
			k.mu.Unlock()
			return
		}
		for l := range k.held {
			if !l.renewing && now.Sub(l.renewedAt) >= every {
				l.renewing = true
				go k.renew(l)
			}
		}
		k.mu.Unlock()
	}
}

// renew renews l once, unless it was stopped.
func (k *leaseKeeper) renew(l *heldLease) {
	l.mu.Lock()
	lost := false
	if !l.stopped {
		lost = k.renewOnce(l)
	}
	l.mu.Unlock()

	k.mu.Lock()
	defer k.mu.Unlock()
	l.renewing = false
	l.renewedAt = time.Now()
	if lost {
		delete(k.held, l)
	}
}

// renewOnce asks the store to extend l and reports whether the lease was
// lost. Any other error is reported and the next tick tries again.
func (k *leaseKeeper) renewOnce(l *heldLease) (lost bool) {
	m := k.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.r.Context()), m.lease/3)
	defer cancel()
	err := m.store.Renew(ctx, l.key, l.owner, m.lease)
	switch {
	case errors.Is(err, store.ErrNotOwner):
		m.errorHandler(l.r, fmt.Errorf("idempotency: lease lost while the handler ran: %w", err))
		return true
	case err != nil:
		m.errorHandler(l.r, fmt.Errorf("idempotency: renew: %w", err))
	}
	return false
}
