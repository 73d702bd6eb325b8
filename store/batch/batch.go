// Package batch lets a store's concurrent calls share round trips; the Redis
// and Postgres stores send their claims and completions through it, and a
// store of one's own may too. A call that finds a lane free is sent at once,
// alone, on the caller's goroutine; a call that finds every lane busy waits
// for the first lane to come free, and goes out with every other call that
// waited meanwhile, in one round trip. Under no load nothing waits; under
// load the number of round trips (and the system calls on both ends) falls
// with the queue. A call whose batch fails goes out again alone, from its
// caller.
package batch

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Item is one call, a pointer in practice: a Sender's alone or send settles
// it (fills its results, or its error) before Do returns nil.
type Item interface {
	comparable
	// Settle records err as the item's outcome when it is not sent: its
	// context ended while it waited, before its caller took it back.
	Settle(err error)
}

// Sender sends Items in batches on at most lanes round trips at a time.
type Sender[T Item] struct {
	alone func(ctx context.Context, item T)
	send  func(ctx context.Context, items []T) (again []T)
	lanes int

	mu      sync.Mutex
	busy    int
	waiting []*waiter[T]
}

type waiter[T Item] struct {
	ctx   context.Context
	item  T
	again bool // its batch left it to be sent alone
	done  chan struct{}
}

// New returns a Sender with two ways to send: alone sends one item by
// itself, and send sends two or more together. Both settle every item
// they are given; send returns those its batch left unsettled (the batch
// failed, or their part of it), which their callers then send again
// alone, each under its own context. send may reorder items and must not
// keep the slice. lanes must be at least 1.
func New[T Item](lanes int, alone func(ctx context.Context, item T), send func(ctx context.Context, items []T) (again []T)) *Sender[T] {
	if lanes < 1 {
		panic("batch: New expects lanes >= 1")
	}
	return &Sender[T]{alone: alone, send: send, lanes: lanes}
}

// Do sends item, alone or in a batch, and returns once it is settled. When
// ctx ends while item waits for a lane, Do takes it out of the queue and
// returns ctx.Err(): it was never sent, and item must not be read. Once a
// batch holds it, its outcome is the batch's, which Do waits for: a store
// may still be reading what item lends it. A call sent alone goes out with
// ctx; a batch with the values of its first caller whose context is live,
// the earliest of their deadlines, so that no caller waits past its own,
// and no caller's cancellation.
func (s *Sender[T]) Do(ctx context.Context, item T) error {
	s.mu.Lock()
	if s.busy < s.lanes {
		s.busy++
		s.mu.Unlock()
		// Deferred, so that a send that panics on the caller's goroutine
		// (net/http recovers a handler's panic) frees its lane.
		defer s.next()
		s.alone(ctx, item)
		return nil
	}
	w := &waiter[T]{ctx: ctx, item: item, done: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		s.mu.Lock()
		if i := slices.Index(s.waiting, w); i >= 0 {
			s.waiting = slices.Delete(s.waiting, i, i+1)
			s.mu.Unlock()
			return ctx.Err()
		}
		s.mu.Unlock()
		<-w.done
	}
	if w.again {
		s.alone(ctx, item)
	}
	return nil
}

// Waiting reports how many calls wait for a lane.
func (s *Sender[T]) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// next passes a lane that came free to the calls waiting for one, on a
// goroutine of its own: the caller whose call went out alone returns.
func (s *Sender[T]) next() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		s.busy--
		return
	}
	batch := s.waiting
	s.waiting = nil
	go s.drain(batch)
}

// drain sends batches on one lane until nothing waits.
func (s *Sender[T]) drain(batch []*waiter[T]) {
	for {
		s.sendWaiting(batch)
		s.mu.Lock()
		if len(s.waiting) == 0 {
			s.busy--
			s.mu.Unlock()
			return
		}
		clear(batch) // let the sent calls' responses go
		batch, s.waiting = s.waiting, batch[:0]
		s.mu.Unlock()
	}
}

// sendWaiting sends the calls of batch whose contexts are live, under the
// earliest of their deadlines and with the first one's values, and wakes
// every caller; a call whose context ended is settled with its error. A
// batch of one live call goes out alone.
func (s *Sender[T]) sendWaiting(batch []*waiter[T]) {
	items := make([]T, 0, len(batch))
	var (
		values   context.Context
		deadline time.Time
		bounded  bool
	)
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.item.Settle(err)
			continue
		}
		if values == nil {
			values = w.ctx
		}
		if d, ok := w.ctx.Deadline(); ok && (!bounded || d.Before(deadline)) {
			deadline, bounded = d, true
		}
		items = append(items, w.item)
	}
	if len(items) > 0 {
		// A caller's cancellation must not cut the others' round trip,
		// and a caller waits for its batch (see Do): the batch keeps the
		// first live caller's values and ends at the first deadline.
		ctx := context.WithoutCancel(values)
		cancel := context.CancelFunc(func() {})
		if bounded {
			ctx, cancel = context.WithDeadline(ctx, deadline)
		}
		if len(items) == 1 {
			s.alone(ctx, items[0])
		} else {
			again := s.send(ctx, items)
			for _, w := range batch {
				w.again = slices.Contains(again, w.item)
			}
		}
		cancel()
	}
	for _, w := range batch {
		close(w.done)
	}
}
