package store

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store/keywatch"
)

// defaultMaxRecords is how many records a Memory store holds unless
// WithMaxRecords says otherwise.
const defaultMaxRecords = 100_000

// defaultMaxBytes is how many bytes of stored responses a Memory store
// holds unless WithMaxBytes says otherwise.
const defaultMaxBytes = 256 << 20

// never is a deadline later than any the store can reach.
const never = time.Duration(math.MaxInt64)

// Memory is a Store that keeps its records in this process's memory: the
// middleware's default, with nothing to run, configure or close. It
// protects one process only (several share SQLite on one host, Redis or
// Postgres across hosts). Leases and retentions run on the process's
// monotonic clock. A lapsed lease's owner may still renew, complete or
// release its record until another Claim or a sweep takes it.
//
// The store is bounded. Expired records are swept, without a goroutine of
// their own, before a new key is inserted; a store still full of live
// records (WithMaxRecords) refuses a new key with ErrFull. A response that
// does not fit in WithMaxBytes is not stored: its key is completed as done
// but not replayable. Claim returns one decoded response to every
// duplicate, which callers must treat as read-only. The context arguments
// are unused. It is a Watcher: a caller waiting for a key in flight is
// woken by the key's Complete or Release (see Watch). A Memory is safe for
// concurrent use and must not be copied after first use.
type Memory struct {
	mu       sync.Mutex
	records  recordIndex
	arena    arena // the data of completed records
	max      int
	bytes    int // counted against maxBytes (see memRecord.size), live or expired
	maxBytes int
	start    time.Time     // origin of the store's monotonic clock
	nextExp  time.Duration // no record expires before this instant
	inserts  int           // new keys since the last sweep
	fence    int64         // the last fencing number given, to any key

	// watches holds, by kept key, the watches of keys in flight (see
	// Watch).
	watches keywatch.Set
}

var _ Watcher = (*Memory)(nil)

// MemoryOption configures a Memory store built by NewMemory.
type MemoryOption func(*Memory)

// WithMaxRecords caps the number of records the store holds, in flight or
// done, including expired ones not yet swept. Defaults to 100000. It
// panics if n is not positive.
func WithMaxRecords(n int) MemoryOption {
	if n <= 0 {
		panic("store: WithMaxRecords expects n > 0")
	}
	return func(m *Memory) { m.max = n }
}

// WithMaxBytes caps the bytes of stored responses the store holds: each
// completed record's key (64 bytes at most, see Memory), fingerprint,
// header and body, and the decoded copies kept for replay. A response that
// would go over the cap is not stored, and its key is completed as done but
// not replayable. The chunks the responses lie in may hold up to twice
// their bytes, plus 320 KiB and 64 bytes for each slot of the records'
// slice (see Memory and arena). Defaults to 256 MiB. It panics if n is not
// positive.
func WithMaxBytes(n int) MemoryOption {
	if n <= 0 {
		panic("store: WithMaxBytes expects n > 0")
	}
	return func(m *Memory) { m.maxBytes = n }
}

// NewMemory returns an empty in-memory store configured by opts.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		records:  newRecordIndex(),
		arena:    newArena(),
		max:      defaultMaxRecords,
		maxBytes: defaultMaxBytes,
		start:    time.Now(),
		nextExp:  never,
	}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// Claim implements Store. A key that is missing (never claimed, released,
// or swept) is claimed, and a record whose lease or retention has ended is
// taken over in place. Either way the claim gets the next number of one
// counter for the whole store, so fencing numbers only grow, even across a
// release or a sweep. A live record in flight under token itself is
// reported claimed again (see Store.Claim). Any other live record (a
// duplicate's) is returned unchanged, without its owner's token and with
// the stored response that every duplicate shares. Claim returns ErrFull
// (wrapped) when a new key finds the store full of live records.
func (m *Memory) Claim(_ context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	if token == "" {
		return Record{}, false, ErrEmptyToken
	}
	key = keptKey(key)
	m.mu.Lock()
	now := m.now()
	h := m.records.hash(key)
	i := m.records.find(h, key)
	if i >= 0 && m.records.slots[i].expires > now {
		r := m.records.slots[i]
		if r.heldBy(Lease{Token: token, Fence: r.fence}) {
			m.mu.Unlock()
			return r.owned(now), true, nil
		}
		if r.decode() && m.bytes+r.decoded <= m.maxBytes {
			// Kept for every later duplicate, and counted; a store at
			// its byte cap decodes for each duplicate instead.
			m.records.slots[i] = r
			m.bytes += r.decoded
		}
		m.mu.Unlock()
		return r.view(now), false, nil
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
	m.mu.Unlock()
	return r.owned(now), true, nil
}

// Renew implements Store. It returns ErrNotOwner if key is missing,
// completed, or in flight under another lease. The owner of an in-flight
// record whose lease has ended but that nobody has taken over still holds
// it, and may renew it.
func (m *Memory) Renew(_ context.Context, key string, owner Lease, lease time.Duration) error {
	return m.withHeld(key, owner, func(i int32) {
		r := &m.records.slots[i]
		r.expires = deadline(m.now(), lease)
		m.noteExpiry(r.expires)
	})
}

// withHeld calls update, under the store's lock, with the slot of key's
// record if owner holds it; otherwise it returns ErrNotOwner. The key is
// put in its kept form (keptKey) before the lock is taken.
func (m *Memory) withHeld(key string, owner Lease, update func(i int32)) error {
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	if i < 0 || !m.records.slots[i].heldBy(owner) {
		return ErrNotOwner
	}
	update(i)
	return nil
}

// Complete implements Store. It returns ErrNotOwner if key is missing,
// already completed, or in flight under another lease. As with Renew, an
// owner whose lease has ended may still complete the record while nobody
// has taken it over. Header keys without values are not stored. A response
// that does not fit under WithMaxBytes, even after a sweep, completes the
// key as done but not replayable. Nothing of resp is kept: the record holds
// copies.
func (m *Memory) Complete(_ context.Context, key string, owner Lease, resp *Response, retention time.Duration) error {
	var scratch [512]byte // holds a typical encoded header without allocating
	var header []byte
	if resp != nil {
		header = encodeHeader(scratch[:0], resp.Header)
	}
	return m.withHeld(key, owner, func(i int32) {
		m.wake(i)
		m.complete(i, resp, header, retention)
	})
}

// complete completes the in-flight record in slot i, with resp and its
// encoded header, or as not replayable if resp is nil or does not fit.
func (m *Memory) complete(i int32, resp *Response, header []byte, retention time.Duration) {
	r := m.records.slots[i]
	done := r
	done.state, done.token = StateUnreplayable, ""
	if resp != nil && m.fits(len(r.key())+len(r.fingerprint())+len(header)+len(resp.Body)) {
		done = r.completed(&m.arena, resp.Status, header, resp.Body)
		m.bytes += done.size()
	}
	done.expires = deadline(m.now(), retention)
	if m.records.slots[i].state == 0 {
		// fits swept, and the sweep removed the record, whose lease had
		// ended; its owner has finished all the same, and the key must
		// not run again.
		m.records.insert(r.hash, done)
	} else {
		m.records.replace(i, done)
	}
	m.noteExpiry(done.expires)
}

// Release implements Store. It returns ErrNotOwner if key is missing,
// completed, or in flight under another lease. As with Renew, an owner
// whose lease has ended may still release the record while nobody has
// taken it over. The key becomes missing; the next Claim of it gets a
// higher fencing number all the same.
func (m *Memory) Release(_ context.Context, key string, owner Lease) error {
	return m.withHeld(key, owner, func(i int32) {
		m.wake(i)
		m.forget(i)
		m.records.remove(i)
	})
}

// maxKeptKey is the longest key a Memory store keeps as it is; see
// keptKey.
const maxKeptKey = 63

// keptKey returns the form of key the store keeps: key itself if it is no
// longer than maxKeptKey, else its HashKey, which is 64 bytes long, a
// length no key kept as it is has, so the two forms never meet. A record
// then holds at most 64 bytes of key however long the caller's is (the
// middleware's keys hold the route as the client sent it).
func keptKey(key string) string {
	if len(key) <= maxKeptKey {
		return key
	}
	return HashKey(key)
}

// now reads the store's monotonic clock.
func (m *Memory) now() time.Duration { return time.Since(m.start) }

// noteExpiry keeps nextExp a lower bound of every record's expiry.
func (m *Memory) noteExpiry(t time.Duration) { m.nextExp = min(m.nextExp, t) }

// makeRoom is called before a new key is inserted. It sweeps when a record
// may have expired and the store is either full or has taken in half its
// size in new keys since the last sweep, so a sweep costs O(1) per insert
// amortised, except in a full store (see Memory). It reports whether there
// is room for one more record.
func (m *Memory) makeRoom(now time.Duration) bool {
	m.inserts++
	n := m.records.len()
	if now >= m.nextExp && (n >= m.max || m.inserts > n/2) {
		m.sweep(now)
	}
	return m.records.len() < min(m.max, math.MaxInt32) // slots are numbered by int32
}

// fits reports whether size more response bytes fit under the cap,
// sweeping expired records first when that could make room.
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
		r := &m.records.slots[i]
		switch {
		case r.state == 0: // a free slot
		case r.expires <= now:
			if r.state == StateInFlight {
				m.wake(int32(i)) // a lapsed lease nobody took over
			}
			m.forget(int32(i))
			m.records.remove(int32(i))
		default:
			next = min(next, r.expires)
		}
	}
	m.nextExp = next
	m.inserts = 0
	m.compactIfWasteful()
}

// forget lets the record in slot i go, before it is removed or replaced:
// its response bytes are no longer counted, and its data leaves the arena.
func (m *Memory) forget(i int32) {
	r := &m.records.slots[i]
	m.bytes -= r.size()
	if r.inArena() {
		m.arena.drop(r.chunk, len(r.data))
	}
}

// compactIfWasteful compacts the arena when it holds too much for the
// records in it (see arena): the data of every record in a chunk being
// evacuated moves to another.
func (m *Memory) compactIfWasteful() {
	if !m.arena.wasteful(len(m.records.slots)) || !m.arena.startCompaction() {
		return
	}
	for i := range m.records.slots {
		r := &m.records.slots[i]
		if r.inArena() && m.arena.evacuating(r.chunk) {
			r.data, r.chunk = m.arena.move(r.data, r.chunk)
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
