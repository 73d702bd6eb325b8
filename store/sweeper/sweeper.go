// Package sweeper runs a store's removal of expired records in the
// background: one round at once, then one every interval.
package sweeper

import (
	"context"
	"time"
)

// Start runs round at once and then every interval, in a goroutine of its
// own, until ctx is done, and returns a channel that is closed when the
// goroutine has stopped. A round that outlasts the interval delays the
// next; rounds never overlap. An interval of 0 means def; a negative one
// panics with a message that names store, the package whose StartSweeper
// was called.
func Start(ctx context.Context, store string, interval, def time.Duration, round func(context.Context)) <-chan struct{} {
	if interval < 0 {
		panic(store + ": StartSweeper expects interval >= 0")
	}
	if interval == 0 {
		interval = def
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			round(ctx)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return done
}
