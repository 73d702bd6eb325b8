package store

import (
	"context"
	"strings"
	"time"
)

var _ Admin = (*Memory)(nil)

// Inspect implements Admin. A key of up to 63 bytes is kept as it is, so
// finding it hashes every such key the store holds, under its lock. The
// Response is shared with the store's duplicates: read-only.
func (m *Memory) Inspect(_ context.Context, hash string) (Record, bool, error) {
	if err := CheckHash(hash, false); err != nil {
		return Record{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	i := m.findHash(hash, now)
	if i < 0 {
		return Record{}, false, nil
	}
	rec := m.viewOf(i, now)
	if kept := m.steps[m.records.at(i).key()]; kept != nil {
		// Clipped, as a claim gets them: a later SaveStep cannot write
		// into what the caller holds. Read without keeping them longer.
		rec.Steps = kept.steps[:len(kept.steps):len(kept.steps)]
	}
	return rec, true, nil
}

// Delete implements Admin, waking the watchers of a deleted key in flight.
// Fences come from one counter, so the next claim's is higher anyway.
func (m *Memory) Delete(_ context.Context, hash string, force bool) (bool, error) {
	if err := CheckHash(hash, false); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.findHash(hash, m.now())
	switch {
	case i < 0:
		return false, nil
	case m.records.at(i).state == StateInFlight && !force:
		return false, ErrLeaseLive
	}
	m.wake(i)
	m.dropSteps(m.records.at(i).key())
	m.forget(i)
	m.records.remove(i)
	return true, nil
}

// Find implements Admin, hashing every live key of up to 63 bytes.
func (m *Memory) Find(_ context.Context, prefix string, limit int) ([]string, error) {
	if err := CheckHash(prefix, true); err != nil {
		return nil, err
	}
	var found []string
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for i := int32(0); len(found) < limit && i < m.records.slots; i++ {
		if r := m.records.at(i); r.state != 0 && r.expires > now {
			if hash := hashOfKept(r.key()); strings.HasPrefix(hash, prefix) {
				found = append(found, hash)
			}
		}
	}
	return found, nil
}

// findHash returns the slot of the live record whose key hashes to hash,
// or -1, under the store's lock.
func (m *Memory) findHash(hash string, now time.Duration) int32 {
	i := m.records.find(m.records.hash(hash), hash) // a key kept as its hash
	for j := int32(0); i < 0 && j < m.records.slots; j++ {
		if r := m.records.at(j); r.state != 0 && len(r.key()) <= maxKeptKey && HashKey(r.key()) == hash {
			i = j
		}
	}
	if i < 0 || m.records.at(i).expires <= now {
		return -1
	}
	return i
}

// hashOfKept returns HashKey of the key kept as kept (see keptKey).
func hashOfKept(kept string) string {
	if len(kept) > maxKeptKey {
		return kept
	}
	return HashKey(kept)
}
