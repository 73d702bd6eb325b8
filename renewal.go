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

// leaseKeeper renews the leases, all of one length, of the keys whose
// handlers (or Do's functions) are running, so that they may run far
// longer than one lease. One goroutine per keeper (a middleware's, or
// Do's for each lease length) does the watching: it starts with the first
// lease held, wakes every twelfth of the lease, and ends at the first
// wake-up that finds no lease held. Do's keepers (with an idle channel)
// start it at its first wake-up instead, and end it as soon as their last
// lease is stopped. At each wake-up it starts a renewal, in a goroutine of
// its own, of every lease whose last successful renewal (or claim) started
// a third of the lease ago or more, unless a renewal of it is already
// running and started less than a third of the lease ago.
//
// So a renewal that fails is tried again at the next wake-up, and one that
// is slow (each may take up to a lease) does not hold the next back: a
// store slower to answer than a third of the lease still renews in time,
// and a call stuck on a dead connection does not stop the others. Renewal
// checks ownership: if the store says the lease was lost (taken over after
// a long store outage), that lease is no longer renewed and its holder is
// told, once; the handler's outcome will then be refused by the store
// rather than overwrite the new owner's record.
type leaseKeeper struct {
	lease    time.Duration
	mu       sync.Mutex
	held     map[*heldLease]struct{}
	watching bool

	// Do's keepers only:
	idle       chan struct{} // buffered: told by stop when no lease is left
	startWatch *time.Timer   // starts the watch at its first wake-up
}

// leaseHolder is what runs under a held lease: a request's handler, or
// Do's function.
type leaseHolder interface {
	// renewalContext returns the context whose values the lease's
	// renewals carry; they do not end with it.
	renewalContext() context.Context
	// renewalFailed is told of a renewal that failed. If err wraps
	// store.ErrNotOwner, the lease was lost and is no longer renewed.
	renewalFailed(err error)
}

// heldLease is the lease of one running handler.
type heldLease struct {
	holder leaseHolder
	store  store.Store
	key    string
	owner  store.Lease

	// Guarded by leaseKeeper.mu:
	renewedAt time.Time // when the last successful renewal (or the claim) started
	triedAt   time.Time // when the last renewal started
	renewals  int       // renewals in flight
	ctx       context.Context
	cancel    context.CancelFunc // ends ctx, and the renewals under it, when the lease is stopped
}

// keep starts renewing owner's lease of key in s, claimed at claimedAt,
// tracked in l, for holder, until l is stopped.
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

// stop ends the renewals of l: none starts after it returns, and any in
// flight is cancelled but not waited for. It reports whether k is left
// without a lease. A store that heeds only deadlines (go-redis, waiting
// for a reply) finishes such a renewal in the background; renew then
// reports nothing (see renew), and the store refuses it if the record has
// since been completed, released or taken over. So a renewal stuck on a
// dead connection never holds up the request's response.
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

// watch starts the renewals that are due until no lease is held.
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

// wakeEvery is the time between two wake-ups of the watch.
func (k *leaseKeeper) wakeEvery() time.Duration {
	return max(k.lease/12, time.Millisecond)
}

// start starts a renewal of l at now. k.mu must be held, and l held by k,
// so that stop, which removes l first, cancels it.
func (k *leaseKeeper) start(l *heldLease, now time.Time) {
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(l.holder.renewalContext()))
	}
	l.renewals++
	l.triedAt = now
	go k.renew(l, now)
}

// renew asks the store, once, to extend l, giving it up to one lease to
// answer. It records a success; a lease the store says is lost is no
// longer renewed and is reported; any other error is reported, and a later
// wake-up tries again. A holder that is a renewalObserver is told of each
// renewal. A renewal that answers after stop has removed l reports nothing;
// one that answers while stop runs may still report.
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

// doKeepers holds the keepers of Do's leases, one per lease length in use:
// a keeper is added with the first lease of its length, and removed, its
// watch ending, with the last.
var doKeepers = struct {
	mu     sync.Mutex
	byTime map[time.Duration]*leaseKeeper
}{byTime: make(map[time.Duration]*leaseKeeper)}

// keepDoLease starts renewing l (see leaseKeeper.keep) under the keeper of
// Do's leases of length lease, and returns that keeper for stopDoLease.
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

// stopDoLease ends the renewals of l by k, which keepDoLease returned, and
// removes k if it is left without a lease.
func stopDoLease(k *leaseKeeper, l *heldLease) {
	doKeepers.mu.Lock()
	defer doKeepers.mu.Unlock()
	if k.stop(l) && doKeepers.byTime[k.lease] == k {
		delete(doKeepers.byTime, k.lease)
	}
}

// renewalObserver is a leaseHolder told of each renewal of its lease: how
// long the store took, and its error (wrapping store.ErrNotOwner if the
// lease was lost).
type renewalObserver interface {
	renewalDone(ctx context.Context, took time.Duration, err error)
}

// requestLease is the holder of a request's lease: the renewals carry the
// request's values, and their failures go to the error handler.
type requestLease struct {
	m *middleware
	r *http.Request
}

func (h *requestLease) renewalContext() context.Context { return h.r.Context() }

func (h *requestLease) renewalFailed(err error) { h.m.errorHandler(h.r, err) }
