package redisstore

import (
	"strconv"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// tombSuffix ends the key of a record's tombstone, after the record's key.
const tombSuffix = ":tomb"

// WithTombstones makes the store keep, for d after a done record's
// retention ends, a tombstone of it (its fingerprint, fence, status and
// completion time), which Claim returns as a StateExpired record, so that
// a retry later than the retention is refused instead of run again. Every
// claim is then one script run. Off by default; d must be positive.
func WithTombstones(d time.Duration) Option {
	if d <= 0 {
		panic("redisstore: WithTombstones expects d > 0")
	}
	return func(s *Store) { s.tombs = d }
}

// tombsMs is how long a tombstone outlives its record, in milliseconds; 0
// when the store keeps none.
func (s *Store) tombsMs() int64 {
	if s.tombs == 0 {
		return 0
	}
	return millis(s.tombs)
}

// tombstone is the record a claim or Inspect found for a tombstone whose
// completion is completedMs, in milliseconds since the epoch.
func tombstone(fingerprint string, fence int64, ttl time.Duration, completedMs string) (store.Record, error) {
	ms, err := strconv.ParseInt(completedMs, 10, 64)
	return store.Record{State: store.StateExpired, Fingerprint: fingerprint, Owner: store.Lease{Fence: fence},
		TTL: ttl, Completed: time.UnixMilli(ms)}, err
}
