package store

import (
	"context"
	"fmt"
	"time"
)

var _ StepStore = (*Memory)(nil)

const defaultStepRetention = 24 * time.Hour

// WithStepRetention sets how long a Memory store keeps the steps of a key
// whose lease ended (released, or lapsed with its owner gone) for the next
// claim, which gets them and keeps them again while it holds the key.
// Defaults to 24 hours; d must be positive.
func WithStepRetention(d time.Duration) MemoryOption {
	if d <= 0 {
		panic("store: WithStepRetention expects d > 0")
	}
	return func(m *Memory) { m.stepRetention = d }
}

// memorySteps are the steps recorded for one kept key. They are kept
// apart from the key's record, which a release removes and a takeover
// replaces, until the key completes or they expire with no lease on it.
type memorySteps struct {
	steps   []Step
	bytes   int // counted against WithMaxBytes
	expires time.Duration
}

// SaveStep implements StepStore. The steps' bytes count against
// WithMaxBytes; a step that does not fit, even after a sweep, gets ErrFull.
func (m *Memory) SaveStep(_ context.Context, key string, owner Lease, step Step) error {
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	if i < 0 || !m.records.at(i).heldBy(owner) {
		return ErrNotOwner
	}
	kept := m.steps[key]
	if kept == nil {
		kept = &memorySteps{}
	}
	for _, s := range kept.steps {
		if s.Name == step.Name {
			return nil
		}
	}
	if err := CheckStep(len(kept.steps), step); err != nil {
		return err
	}
	size := len(step.Name) + len(step.Result)
	if !m.fits(size) {
		return fmt.Errorf("%w: %d bytes of responses and steps", ErrFull, m.maxBytes)
	}
	if m.steps == nil {
		m.steps = make(map[string]*memorySteps)
	}
	step.Result = append([]byte(nil), step.Result...)
	kept.steps = append(kept.steps, step)
	kept.bytes += size
	m.bytes += size
	m.steps[key] = kept
	m.keepSteps(key, m.now())
	return nil
}

// stepsOf returns the steps recorded for the kept key a claim has just
// taken, which keeps them from now on (see keepSteps).
func (m *Memory) stepsOf(key string, now time.Duration) []Step {
	kept := m.keepSteps(key, now)
	if kept == nil {
		return nil
	}
	return kept.steps[:len(kept.steps):len(kept.steps)]
}

// keepSteps returns the steps of the kept key, if any, and keeps them for
// the retention from now: a lease on the key starts or ends.
func (m *Memory) keepSteps(key string, now time.Duration) *memorySteps {
	if len(m.steps) == 0 {
		return nil
	}
	kept := m.steps[key]
	if kept != nil {
		kept.expires = deadline(now, m.stepRetention)
		m.noteExpiry(kept.expires)
	}
	return kept
}

// dropSteps forgets the steps of the kept key: it completed, or an
// operator deleted it.
func (m *Memory) dropSteps(key string) {
	if kept := m.steps[key]; kept != nil {
		m.bytes -= kept.bytes
		delete(m.steps, key)
	}
}

// sweepSteps forgets the steps expired at now whose key no lease holds,
// and returns when the next of the others expires. Steps under a lease
// that outlived their retention are kept for the retention after it.
func (m *Memory) sweepSteps(now time.Duration) time.Duration {
	next := never
	for key, kept := range m.steps {
		if kept.expires <= now {
			i := m.records.find(m.records.hash(key), key)
			if i < 0 || m.records.at(i).state != StateInFlight || m.records.at(i).expires <= now {
				m.bytes -= kept.bytes
				delete(m.steps, key)
				continue
			}
			kept.expires = deadline(m.records.at(i).expires, m.stepRetention)
		}
		next = min(next, kept.expires)
	}
	return next
}
