package store

import "context"

// Watcher is a Store that can wake a caller waiting for an in-flight key.
// Waiters poll as well, in case a wake-up never comes.
type Watcher interface {
	Store

	// Watch returns a channel closed once key's record may have left the
	// in-flight state, never while it stays in flight; the caller then looks
	// again with Claim. The caller calls stop exactly once. On error nothing
	// is watched (stop is nil) and the caller polls; a store that cannot
	// watch in its configuration may fail every Watch.
	Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}
