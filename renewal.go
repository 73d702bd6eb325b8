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

// leaseKeeper renews the leases, all of one length, of running handlers (or
// Do's functions). One watch goroutine wakes every twelfth of the lease while
// a lease is held, and starts a renewal, in a goroutine of its own, of each
// lease last renewed a third of the lease ago or more, unless one started
// less than a third ago is still running. So a failed renewal is retried, and
// a slow or stuck one does not hold back the next. A lease the store says is
// lost (ErrNotOwner) is dropped and its holder told once; the store then
// refuses the holder's outcome. Do's keepers (with idle) start the watch at
// its first wake-up and end it with their last lease.
type leaseKeeper struct {
	lease    time.Duration
	mu       sync.Mutex
	held     map[*heldLease]struct{}
	watching bool

	// Do's keepers only:
	idle       chan struct{} // buffered: stop tells it when no lease is left
	startWatch *time.Timer   // starts the watch at its first wake-up
}

// leaseHolder runs under a held lease: a handler, or Do's function.
type leaseHolder interface {
	// renewalContext's values, not its end, reach the renewals.
	renewalContext() context.Context
	// renewalFailed is told of a failed renewal; ErrNotOwner means lost.
	renewalFailed(err error)
}

type heldLease struct {
	holder leaseHolder
	store  store.Store
	key    string
	owner  store.Lease

	// Guarded by leaseKeeper.mu:
	renewedAt time.Time // start of the last successful renewal or claim
	triedAt   time.Time // start of the last renewal
	renewals  int       // renewals in flight
	ctx       context.Context
	cancel    context.CancelFunc // called by stop
}

// keep renews owner's lease of key, claimed at claimedAt, until l is stopped.
func (k *leaseKeeper) keep(l *heldLease, holder leaseHolder, s store.Store, key string, owner store.Lease, claimedAt time.Time) {
	*l = heldLease{holder: holder, store: s, key: key, owner: owner, renewedAt: claimedAt}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[l] = struct{}{}
	if !k.watching {
		k.watching = true
		if k.idle == nil {
			go k.watch()
		} else {
			k.startWatch = time.AfterFunc(k.wakeEvery(), k.watch)
		}
	}
}

// stop ends l's renewals: none starts after it, and one in flight is
// cancelled but not awaited, so a renewal stuck on a dead connection never
// holds up the response; the store refuses it if the record has moved on. It
// reports whether k holds no lease.
func (k *leaseKeeper) stop(l *heldLease) (idle bool) {
	k.mu.Lock()
	delete(k.held, l)
	cancel := l.cancel
	idle = len(k.held) == 0
	switch {
	case !idle || k.idle == nil || !k.watching:
	case k.startWatch.Stop():
		k.watching = false
	default:
		select {
		case k.idle <- struct{}{}:
		default: // already told
		}
	}
	k.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return idle
}

func (k *leaseKeeper) watch() {
	every := k.lease / 3
	ticker := time.NewTicker(k.wakeEvery())
	defer ticker.Stop()
	for {
		var now time.Time
		select {
		case now = <-ticker.C:
		case <-k.idle:
			now = time.Now()
		}
		k.mu.Lock()
		if len(k.held) == 0 {
			k.watching = false
			k.mu.Unlock()
			return
		}
		for l := range k.held {
			due := now.Sub(l.renewedAt) >= every
			if due && (l.renewals == 0 || now.Sub(l.triedAt) >= every) {
				k.start(l, now)
			}
		}
		k.mu.Unlock()
	}
}

func (k *leaseKeeper) wakeEvery() time.Duration {
	return max(k.lease/12, time.Millisecond)
}

// start starts a renewal of l; k.mu must be held with l in k, so that stop,
// which removes l first, cancels it.
func (k *leaseKeeper) start(l *heldLease, now time.Time) {
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(l.holder.renewalContext()))
	}
	l.renewals++
	l.triedAt = now
	go k.renew(l, now)
}

// renew asks the store once, within one lease, to extend l. A renewal that
// answers after stop removed l reports nothing.
func (k *leaseKeeper) renew(l *heldLease, started time.Time) {
	ctx, cancel := context.WithDeadline(l.ctx, started.Add(k.lease))
	called := time.Now()
	err := l.store.Renew(ctx, l.key, l.owner, k.lease)
	took := time.Since(called)
	cancel()

	k.mu.Lock()
	l.renewals--
	_, held := k.held[l]
	switch {
	case err == nil:
		if started.After(l.renewedAt) {
			l.renewedAt = started
		}
	case errors.Is(err, store.ErrNotOwner) && held:
		delete(k.held, l)
	}
	k.mu.Unlock()

	if o, ok := l.holder.(renewalObserver); ok && held {
		o.renewalDone(l.ctx, took, err)
	}
	switch {
	case err == nil, !held:
	case errors.Is(err, store.ErrNotOwner):
		l.holder.renewalFailed(fmt.Errorf("idempotency: lease lost while the handler ran: %w", err))
	default:
		l.holder.renewalFailed(fmt.Errorf("idempotency: renew: %w", err))
	}
}

// doKeepers holds Do's keepers, one per lease length in use.
var doKeepers = struct {
	mu     sync.Mutex
	byTime map[time.Duration]*leaseKeeper
}{byTime: make(map[time.Duration]*leaseKeeper)}

// keepDoLease starts renewing l under the keeper of Do's leases of length
// lease, and returns it for stopDoLease.
func keepDoLease(lease time.Duration, l *heldLease, holder leaseHolder, s store.Store, key string, owner store.Lease, claimedAt time.Time) *leaseKeeper {
	doKeepers.mu.Lock()
	defer doKeepers.mu.Unlock()
	k := doKeepers.byTime[lease]
	if k == nil {
		k = &leaseKeeper{lease: lease, held: make(map[*heldLease]struct{}), idle: make(chan struct{}, 1)}
		doKeepers.byTime[lease] = k
	}
	k.keep(l, holder, s, key, owner, claimedAt)
	return k
}

// stopDoLease stops l and removes k once it holds no lease.
func stopDoLease(k *leaseKeeper, l *heldLease) {
	doKeepers.mu.Lock()
	defer doKeepers.mu.Unlock()
	if k.stop(l) && doKeepers.byTime[k.lease] == k {
		delete(doKeepers.byTime, k.lease)
	}
}

// renewalObserver is a leaseHolder told of each renewal.
type renewalObserver interface {
	renewalDone(ctx context.Context, took time.Duration, err error)
}

// requestLease holds a request's lease; failures go to the error handler.
type requestLease struct {
	m *middleware
	r *http.Request
	c *call
}

func (h *requestLease) renewalContext() context.Context { return h.r.Context() }

func (h *requestLease) renewalFailed(err error) { h.m.storeError(h.r, h.c, err) }
