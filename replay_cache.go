package idempotency

import (
	"hash/maphash"
	"math/bits"
	"net/http"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// replayCache keeps done records in the process so a duplicate is answered
// without a store call (WithReplayCache). Shards, each under its own lock,
// hold their share of entries and drop the oldest when full (most replays
// come soon after the run). A nil *replayCache keeps nothing.
type replayCache struct {
	maxAge time.Duration
	seed   maphash.Seed
	mask   uint64 // len(shards) - 1; len(shards) is a power of two
	shards []cacheShard
}

const maxCacheShards = 16

// cacheShard is one shard of a replayCache. order is a ring of its keys;
// order[next] is the one to drop next, "" while there is room.
type cacheShard struct {
	mu      sync.RWMutex
	entries map[string]cacheEntry
	order   []string
	next    int
	_       [64]byte // keeps shards' locks off one cache line
}

type cacheEntry struct {
	state       store.State
	fingerprint string
	response    *store.Response // read-only, shared with every replay
	expires     sinceEpoch
}

// newReplayCache returns a cache of at most entries records, each kept at
// most maxAge; both must be positive.
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

// now is the time to pass to put, taken before the store call so the entry
// ends no later than the stored record. A nil cache reads no clock.
func (rc *replayCache) now() sinceEpoch {
	if rc == nil {
		return 0
	}
	return now()
}

// get returns the unexpired record kept for key.
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

// put keeps a done rec, reported by a store call sent at sent with ttl
// left, for ttl or maxAge, whichever is less. rec.Response must not change
// from now on.
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

func (rc *replayCache) shard(key string) *cacheShard {
	return &rc.shards[maphash.String(rc.seed, key)&rc.mask]
}

// completed returns the record that completing c's key with resp leaves
// in the store. The response is copied, since the recorder reuses its
// memory, without valueless header names, which no store keeps.
func (rc *replayCache) completed(c *call, resp *store.Response) store.Record {
	rec := store.Record{State: store.StateUnreplayable, Fingerprint: c.fingerprint}
	if rc == nil || resp == nil {
		return rec
	}
	rec.State = store.StateCompleted
	rec.Response = &store.Response{Status: resp.Status, Header: copyHeader(resp.Header), Body: append([]byte(nil), resp.Body...)}
	return rec
}

// copyHeader copies h, without valueless names, into one array.
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
