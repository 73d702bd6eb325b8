package idempotency

import (
	"hash/maphash"
	"math/bits"
	"net/http"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// replayCache keeps done records (completed or unreplayable) in the
// process, by storage key, so that a duplicate is answered without a store
// call (WithReplayCache). Its entries are split among shards by a hash of
// the key, each under a lock of its own, so that concurrent lookups of
// different keys seldom meet. A shard holds at most its share of the
// entries and, when full, drops the entry it took in longest ago (first in,
// first out: a request is replayed mostly soon after it ran). An entry
// ends at its expiry; lookups skip it from then on, and the slot it holds
// goes to a new key in its turn. A nil *replayCache keeps nothing.
type replayCache struct {
	maxAge time.Duration
	seed   maphash.Seed
	mask   uint64 // len(shards) - 1; the number of shards is a power of two
	shards []cacheShard
}

// maxCacheShards bounds the shards of a replayCache: enough that 32
// goroutines on a handful of cores seldom wait for one another's lock.
const maxCacheShards = 16

// cacheShard is one shard of a replayCache. order names its keys in the
// order they came in, as a ring: its next slot holds the key to drop for
// the next new one, or "" while the shard has room (a storage key is never
// empty).
type cacheShard struct {
	mu      sync.RWMutex
	entries map[string]cacheEntry
	order   []string
	next    int
	_       [64]byte // keeps two shards' locks off one cache line
}

// cacheEntry is a done record as the cache keeps it.
type cacheEntry struct {
	state       store.State
	fingerprint string
	response    *store.Response // read-only, shared with every replay
	expires     sinceEpoch
}

// newReplayCache returns a cache of at most entries records, each kept at
// most maxAge. Both must be above zero.
func newReplayCache(entries int, maxAge time.Duration) *replayCache {
	shards := min(maxCacheShards, 1<<(bits.Len(uint(entries))-1))
	rc := &replayCache{maxAge: maxAge, seed: maphash.MakeSeed(), mask: uint64(shards - 1), shards: make([]cacheShard, shards)}
	for i := range rc.shards {
		size := entries / shards
		if i < entries%shards {
			size++
		}
		rc.shards[i].entries = make(map[string]cacheEntry, size)
		rc.shards[i].order = make([]string, size)
	}
	return rc
}

// now returns the time on the cache's clock, to be passed to put: taken
// before the store call whose record it keeps, so that the entry ends no
// later than the record does on the store's clock. A nil cache reads no
// clock.
func (rc *replayCache) now() sinceEpoch {
	if rc == nil {
		return 0
	}
	return now()
}

// get returns the record kept for key, if one is kept and has not ended.
// A miss allocates nothing.
func (rc *replayCache) get(key string) (store.Record, bool) {
	if rc == nil {
		return store.Record{}, false
	}
	s := rc.shard(key)
	s.mu.RLock()
	e, ok := s.entries[key]
	s.mu.RUnlock()
	if !ok {
		return store.Record{}, false
	}
	left := e.expires - now()
	if left <= 0 {
		return store.Record{}, false
	}
	return store.Record{State: e.state, Fingerprint: e.fingerprint, Response: e.response, TTL: left}, true
}

// put keeps rec, a record of key that a store call sent at sent reported
// with ttl of retention left, for that long or maxAge, whichever ends
// first. A record in flight, or one without a retention left, is not kept.
// rec.Response must stay unchanged from now on.
func (rc *replayCache) put(key string, rec store.Record, sent sinceEpoch, ttl time.Duration) {
	if rc == nil || ttl <= 0 || rec.State != store.StateCompleted && rec.State != store.StateUnreplayable {
		return
	}
	e := cacheEntry{state: rec.State, fingerprint: rec.Fingerprint, response: rec.Response,
		expires: sent + min(ttl, rc.maxAge)}
	s := rc.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[key]; !ok {
		delete(s.entries, s.order[s.next])
		s.order[s.next] = key
		s.next = (s.next + 1) % len(s.order)
	}
	s.entries[key] = e
}

// shard returns the shard that holds key.
func (rc *replayCache) shard(key string) *cacheShard {
	return &rc.shards[maphash.String(rc.seed, key)&rc.mask]
}

// completed returns the record that a completion of c's key with resp
// (nil: done but not replayable) leaves in the store, for the cache. With
// the cache on, the response is copied, since the recorder takes its
// memory back once the store has it, without the header names that have
// no values, which no store keeps, so that the cache replays what a store
// would.
func (rc *replayCache) completed(c *call, resp *store.Response) store.Record {
	rec := store.Record{State: store.StateUnreplayable, Fingerprint: c.fingerprint}
	if rc == nil || resp == nil {
		return rec
	}
	rec.State = store.StateCompleted
	rec.Response = &store.Response{Status: resp.Status, Header: copyHeader(resp.Header), Body: append([]byte(nil), resp.Body...)}
	return rec
}

// copyHeader returns a copy of h without the names that have no values,
// its values in one array.
func copyHeader(h http.Header) http.Header {
	n := 0
	for _, values := range h {
		n += len(values)
	}
	values := make([]string, 0, n)
	out := make(http.Header, len(h))
	for name, vs := range h {
		if len(vs) > 0 {
			start := len(values)
			values = append(values, vs...)
			out[name] = values[start:len(values):len(values)]
		}
	}
	return out
}
