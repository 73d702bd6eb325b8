package store

import "context"

// Watcher is a Store that can wake a caller waiting for an in-flight key.
// Waiters keep polling as well, for a wake-up that never comes.
type Watcher interface {
	Store

	// Watch returns a channel closed once key's record may have left the
	// in-flight state (completed, released or removed); never while it
	// stays in flight. A wake-up is a hint: the caller looks again with
	// Claim. The caller calls stop exactly once, when it stops waiting. An
	// error means nothing is watched (stop is nil) and the caller polls; a
	// store may fail every Watch in a configuration that cannot watch.
	Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}
