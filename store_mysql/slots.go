package mysqlstore

import "context"

// slots bounds the connections that claims, the sweeper and open
// transactions take from the pool, so that an owner's renew, complete or
// release never queues behind them for one. A nil slots bounds nothing.
type slots chan struct{}

// newSlots leaves a quarter of a pool of maxOpen connections (0:
// unbounded), at least one, to others; a pool of one is shared.
func newSlots(maxOpen int) slots {
	if maxOpen == 0 {
		return nil
	}
	return make(slots, max(1, maxOpen-max(1, maxOpen/4)))
}

// take waits for a slot until ctx ends.
func (s slots) take(ctx context.Context) error {
	if s == nil {
		return nil
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// give returns a slot take took.
func (s slots) give() {
	if s != nil {
		<-s
	}
}
