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
// next; rounds never overlap. interval must be positive.
func Start(ctx context.Context, interval time.Duration, round func(context.Context)) <-chan struct{} {
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
