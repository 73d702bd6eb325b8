package sqlitestore

import (
	"context"
	"slices"
	"sync"
)

// turn is held by the one statement of a store that runs at a time. An
// owner's statement gets it first, so that a storm of claims delays an
// owner by one statement at most.
type turn struct {
	mu     sync.Mutex
	held   bool
	owners []chan struct{} // waiting owner statements, in order
	others []chan struct{} // waiting claims and sweeps, in order
}

// take waits for the turn, ahead of the others if owner, and returns nil
// once it holds it, or ctx's error.
func (t *turn) take(ctx context.Context, owner bool) error {
	t.mu.Lock()
	if !t.held {
		t.held = true
		t.mu.Unlock()
		return nil
	}
	given := make(chan struct{}, 1)
	queue := &t.others
	if owner {
		queue = &t.owners
	}
	*queue = append(*queue, given)
	t.mu.Unlock()
	select {
	case <-given:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	if i := slices.Index(*queue, given); i >= 0 {
		*queue = slices.Delete(*queue, i, i+1)
		t.mu.Unlock()
		return ctx.Err()
	}
	t.mu.Unlock()
	t.give() // handed over as ctx ended: pass it on
	return ctx.Err()
}

// give hands the turn to the next waiter, owners first, or frees it.
func (t *turn) give() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, queue := range []*[]chan struct{}{&t.owners, &t.others} {
		if len(*queue) > 0 {
			next := (*queue)[0]
			*queue = slices.Delete(*queue, 0, 1)
			next <- struct{}{}
			return
		}
	}
	t.held = false
}
