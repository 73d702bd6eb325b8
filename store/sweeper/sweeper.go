// Package sweeper runs a store's removal of expired records in the
// background.
package sweeper

import (
	"context"
	"time"
)

// Start runs round at once and then every interval (0 means def), never
// overlapping, until ctx is done; the channel returned is closed when it
// has stopped. A negative interval panics, naming store.
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
