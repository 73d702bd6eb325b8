package store

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store/keywatch"
)

const defaultMaxRecords = 100_000

const defaultMaxBytes = 256 << 20

const never = time.Duration(math.MaxInt64)

// Memory is a Store and Watcher that keeps its records in this process's
// memory, on its monotonic clock: the middleware's default. A store full of
// live records refuses a new key with ErrFull, and a response over
// WithMaxBytes completes its key as done but not replayable. A lapsed
// lease's owner may still renew, complete or release its record until
// another Claim or a sweep takes it. It must not be copied after first use.
type Memory struct {
	mu       sync.Mutex
	records  recordIndex
	arena    arena // the data of completed records
	max      int
	bytes    int // counted against maxBytes, live or expired
	maxBytes int
	start    time.Time
	nextExp  time.Duration // no record expires before this instant
	inserts  int           // new keys since the last sweep
	fence    int64         // the last fencing number given

	steps         map[string]*memorySteps // by kept key; see SaveStep
	stepRetention time.Duration
	tombstones    time.Duration // 0: none kept

	watches keywatch.Set // by kept key
}

var _ Watcher = (*Memory)(nil)

// MemoryOption configures a Memory store built by NewMemory.
type MemoryOption func(*Memory)

// WithMaxRecords caps the records the store holds, expired ones not yet
// swept included. Defaults to 100000; n must be positive.
func WithMaxRecords(n int) MemoryOption {
	if n <= 0 {
		panic("store: WithMaxRecords expects n > 0")
	}
	return func(m *Memory) { m.max = n }
}

// WithMaxBytes caps the bytes of stored responses (key, fingerprint, header
// and body of each completed record, and the decoded copies kept for
// replay); a response over the cap is not stored. The chunks holding them
// may reach twice the cap, plus a little per slot (see arena). Defaults to
// 256 MiB; n must be positive.
func WithMaxBytes(n int) MemoryOption {
	if n <= 0 {
		panic("store: WithMaxBytes expects n > 0")
	}
	return func(m *Memory) { m.maxBytes = n }
}

// WithTombstones makes the store keep, for d after a done record's
// retention ends, a tombstone of it: its key, fingerprint and completion
// time, which Claim returns as a StateExpired record, so that a retry
// later than the retention is refused instead of run again. Tombstones
// count against WithMaxRecords, not WithMaxBytes. Off by default; d must
// be positive.
func WithTombstones(d time.Duration) MemoryOption {
	if d <= 0 {
		panic("store: WithTombstones expects d > 0")
	}
	return func(m *Memory) { m.tombstones = d }
}

// NewMemory returns an empty Memory store.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		records:  newRecordIndex(),
		arena:    newArena(),
		max:      defaultMaxRecords,
		maxBytes: defaultMaxBytes,
		start:    time.Now(),
		nextExp:  never,

		stepRetention: defaultStepRetention,
	}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

var _ Pinger = (*Memory)(nil)

// Ping implements Pinger: the store lives in this process and always
// answers.
func (*Memory) Ping(context.Context) error { return nil }

// Claim implements Store. Fencing numbers come from one counter for the
// whole store, so they only grow, across a release or a sweep too. Every
// duplicate shares one decoded response. Claim returns ErrFull (wrapped)
// when a new key finds the store full of live records.
func (m *Memory) Claim(_ context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	if token == "" {
		return Record{}, false, ErrEmptyToken
	}
	key = keptKey(key)
	m.mu.Lock()
	now := m.now()
	h := m.records.hash(key)
	i := m.records.find(h, key)
	if i >= 0 && m.records.at(i).expires > now {
		r := *m.records.at(i)
		if r.heldBy(Lease{Token: token, Fence: r.fence}) {
			rec := r.owned(now)
			rec.Steps = m.stepsOf(key, now)
			m.mu.Unlock()
			return rec, true, nil
		}
		rec := m.viewOf(i, now)
		m.mu.Unlock()
		return rec, false, nil
	}
	if i >= 0 && m.entomb(i, now) {
		rec := m.viewOf(i, now)
		m.mu.Unlock()
		return rec, false, nil
	}
	if i >= 0 {
		m.forget(i)
	} else if !m.makeRoom(now) {
		m.mu.Unlock()
		return Record{}, false, fmt.Errorf("%w: %d live records", ErrFull, m.max)
	}
	m.fence++
	r := inFlight(key, fingerprint, token, m.fence, deadline(now, lease))
	if i >= 0 {
		m.records.replace(i, r)
		m.compactIfWasteful()
	} else {
		m.records.insert(h, r)
	}
	m.noteExpiry(r.expires)
	rec := r.owned(now)
	rec.Steps = m.stepsOf(key, now)
	m.mu.Unlock()
	return rec, true, nil
}

// viewOf returns slot i's record as a duplicate sees it at now, its
// response decoded once for every later duplicate to share.
func (m *Memory) viewOf(i int32, now time.Duration) Record {
	r := *m.records.at(i)
	if r.decode() && m.bytes+r.decoded <= m.maxBytes {
		// A store at its byte cap decodes for each duplicate instead.
		*m.records.at(i) = r
		m.bytes += r.decoded
	}
	return r.view(now, m.start)
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, key string, owner Lease, lease time.Duration) error {
	return m.withHeld(key, owner, func(i int32) {
		r := m.records.at(i)
		r.expires = deadline(m.now(), lease)
		m.noteExpiry(r.expires)
	})
}

// withHeld calls update, under the store's lock, with the slot of key's
// record if owner holds it; otherwise it returns ErrNotOwner.
func (m *Memory) withHeld(key string, owner Lease, update func(i int32)) error {
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	if i < 0 || !m.records.at(i).heldBy(owner) {
		return ErrNotOwner
	}
	update(i)
	return nil
}

// Complete implements Store. It returns nil, changing nothing, if owner
// completed the key already. A response that does not fit under
// WithMaxBytes, even after a sweep, completes the key as done but not
// replayable.
func (m *Memory) Complete(_ context.Context, key string, owner Lease, resp *Response, retention time.Duration) error {
	var scratch [512]byte // a typical encoded header, not allocated
	var header []byte
	if resp != nil {
		header = encodeHeader(scratch[:0], resp.Header)
	}
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	switch {
	case i >= 0 && m.records.at(i).heldBy(owner):
		m.wake(i)
		m.dropSteps(key)
		m.complete(i, resp, header, retention)
	case i < 0 || !m.records.at(i).doneBy(owner):
		return ErrNotOwner
	}
	return nil
}

// complete completes the in-flight record in slot i, as not replayable if
// resp is nil or does not fit.
func (m *Memory) complete(i int32, resp *Response, header []byte, retention time.Duration) {
	r := *m.records.at(i)
	done := r
	done.state = StateUnreplayable
	if resp != nil && m.fits(len(r.token)+len(r.key())+len(r.fingerprint())+len(header)+len(resp.Body)) {
		done = r.completed(&m.arena, resp.Status, header, resp.Body)
		m.bytes += done.size()
	}
	done.completedAt = m.now()
	done.expires = deadline(done.completedAt, retention)
	if m.records.at(i).state == 0 {
		// fits swept away the lapsed record; its owner has finished all
		// the same, and the key must not run again.
		m.records.insert(r.hash, done)
	} else {
		m.records.replace(i, done)
	}
	m.noteExpiry(done.expires)
}

// Release implements Store. The key becomes missing.
func (m *Memory) Release(_ context.Context, key string, owner Lease) error {
	return m.withHeld(key, owner, func(i int32) {
		m.wake(i)
		m.keepSteps(m.records.at(i).key(), m.now())
		m.forget(i)
		m.records.remove(i)
	})
}

const maxKeptKey = 63

// keptKey returns key if it is at most maxKeptKey bytes, else its 64-byte
// HashKey: a length no key kept as it is has, so the two never meet.
func keptKey(key string) string {
	if len(key) <= maxKeptKey {
		return key
	}
	return HashKey(key)
}

func (m *Memory) now() time.Duration { return time.Since(m.start) }

func (m *Memory) noteExpiry(t time.Duration) { m.nextExp = min(m.nextExp, t) }

// makeRoom reports whether a new key fits. It sweeps when a record may have
// expired and the store is full or has taken in half its size in new keys
// since the last sweep, so sweeping costs O(1) per insert amortised.
func (m *Memory) makeRoom(now time.Duration) bool {
	m.inserts++
	n := m.records.len()
	if now >= m.nextExp && (n >= m.max || m.inserts > n/2) {
		m.sweep(now)
	}
	return m.records.len() < min(m.max, math.MaxInt32) // slots are numbered by int32
}

// fits reports whether size more response bytes fit under the cap,
// sweeping first when that could make room.
func (m *Memory) fits(size int) bool {
	if m.bytes+size <= m.maxBytes {
		return true
	}
	if now := m.now(); now >= m.nextExp {
		m.sweep(now)
	}
	return m.bytes+size <= m.maxBytes
}

// sweep deletes every record expired at now and recomputes nextExp.
func (m *Memory) sweep(now time.Duration) {
	next := never
	for i := range m.records.slots {
		r := m.records.at(i)
		switch {
		case r.state == 0: // a free slot
		case r.expires <= now && m.entomb(i, now):
			next = min(next, r.expires)
		case r.expires <= now:
			if r.state == StateInFlight {
				m.wake(i) // a lapsed lease nobody took over
			}
			m.forget(i)
			m.records.remove(i)
		default:
			next = min(next, r.expires)
		}
	}
	m.nextExp = min(next, m.sweepSteps(now))
	m.inserts = 0
	m.compactIfWasteful()
}

// forget uncounts and frees the data of the record in slot i.
func (m *Memory) forget(i int32) {
	r := m.records.at(i)
	m.bytes -= r.size()
	if r.inArena() {
		m.arena.drop(r.chunk, len(r.data))
	}
}

// compactIfWasteful moves the data out of the chunks the arena evacuates,
// when it holds too much for its records.
func (m *Memory) compactIfWasteful() {
	if !m.arena.wasteful(int(m.records.slots)) || !m.arena.startCompaction() {
		return
	}
	for i := range m.records.slots {
		r := m.records.at(i)
		if r.inArena() && m.arena.evacuating(r.chunk) {
			r.move(m.arena.move(r.data, r.chunk))
		}
	}
}

// deadline returns now+d, saturating instead of overflowing.
func deadline(now, d time.Duration) time.Duration {
	if d > never-now {
		return never
	}
	return now + d
}

// entomb turns slot i's done record, whose retention ended by now, into
// its tombstone, if the store keeps tombstones and the tombstone's time
// has not passed, and reports whether it did.
func (m *Memory) entomb(i int32, now time.Duration) bool {
	r := m.records.at(i)
	if m.tombstones == 0 || r.state != StateCompleted && r.state != StateUnreplayable {
		return false
	}
	expires := deadline(r.expires, m.tombstones)
	if expires <= now {
		return false
	}
	t := r.tombstone(expires)
	m.forget(i)
	m.records.replace(i, t)
	m.noteExpiry(expires)
	return true
}
