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
// every twelfth of the lease and renews, each in its own goroutine, every
// lease whose last successful renewal (or claim) started a third of the lease
// ago or more. A renewal that fails is tried again at the next wake-up, so a
// lease is renewed at least twice more before it could lapse, however slow
// the store is to answer. Renewal checks ownership: if
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
	renewedAt time.Time  // when the last successful renewal started; guarded by leaseKeeper.mu
	stopped   bool
}

// keep starts renewing owner's lease of key, claimed at claimedAt, tracked
// in l, until l is stopped.
func (k *leaseKeeper) keep(l *heldLease, r *http.Request, key string, owner store.Lease, claimedAt time.Time) {
	*l = heldLease{r: r, key: key, owner: owner, renewedAt: claimedAt}
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
	ticker := time.NewTicker(max(k.m.lease/12, time.Millisecond))
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
	started := time.Now()
	l.mu.Lock()
	renewed, lost := false, false
	if !l.stopped {
		renewed, lost = k.renewOnce(l)
	}
	l.mu.Unlock()

	k.mu.Lock()
	defer k.mu.Unlock()
	l.renewing = false
	if renewed {
		l.renewedAt = started
	}
	if lost {
		delete(k.held, l)
	}
}

// renewOnce asks the store to extend l and reports whether it did, or
// whether the lease was lost. Any other error is reported, and the next
// wake-up tries again.
func (k *leaseKeeper) renewOnce(l *heldLease) (renewed, lost bool) {
	m := k.m
	ctx, cancel := context.WithTimeout(detached(l.r), m.lease/3)
	defer cancel()
	err := m.store.Renew(ctx, l.key, l.owner, m.lease)
	switch {
	case errors.Is(err, store.ErrNotOwner):
		m.errorHandler(l.r, fmt.Errorf("idempotency: lease lost while the handler ran: %w", err))
		return false, true
	case err != nil:
		m.errorHandler(l.r, fmt.Errorf("idempotency: renew: %w", err))
		return false, false
	}
	return true, false
}
