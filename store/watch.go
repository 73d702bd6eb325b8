package store

import "context"

// Watcher is a Store that can wake a caller waiting for an in-flight key,
// so that the caller need not poll: the middleware's WithWait and Do's
// waiting option watch the key when their store implements Watcher, and
// keep polling, at their usual intervals, for a wake-up that never comes
// (a dropped connection, a lease that lapsed without a release).
type Watcher interface {
	Store

	// Watch starts watching key and returns a channel that is closed once
	// key's record may have left the in-flight state after Watch was
	// called: it was completed, released or removed. If the record is not
	// in flight when Watch is called, the channel may be closed at once;
	// while the record stays in flight, it is never closed. A wake-up is
	// only a hint: the caller looks again with Claim.
	//
	// The caller calls stop exactly once, when it no longer waits, whether
	// or not the channel was closed; stop frees what the watch holds. An
	// error means nothing is watched (stop is nil): the caller polls, and
	// does not report the error, since a store may fail every Watch in a
	// configuration that cannot watch (a Redis Ring, say).
	Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}
