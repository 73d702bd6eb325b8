package store

import (
	"context"

	"github.com/seed43327c4c/idempotency/store/keywatch"
)

// closedWatch is the channel Watch returns for a key not in flight.
var closedWatch = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Watch implements Watcher. The channel of a key that is missing, done, or
// in flight under a lease that has ended (the next Claim takes it over) is
// closed at once. Otherwise it is closed when the key is completed,
// released, or swept after its lease ended. It never fails, and ctx is
// unused. A store that nobody watches allocates nothing for watches.
func (m *Memory) Watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	if i < 0 || m.records.slots[i].state != StateInFlight || m.records.slots[i].expires <= m.now() {
		return closedWatch, func() {}, nil
	}
	w := m.watches.Add(key)
	return w.Changed(), func() { m.unwatch(key, w) }, nil
}

// unwatch stops one of w's watchers of key (see keywatch.Set.Stop).
func (m *Memory) unwatch(key string, w *keywatch.Watch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watches.Stop(key, w)
}

// wake closes the channel of the watches of the key in slot i, if any, and
// forgets them: a later Watch of the key, once it is claimed again, gets a
// channel of its own. It is called under the store's lock, and while no
// key is watched it returns before it reads the key.
func (m *Memory) wake(i int32) {
	if m.watches.Len() == 0 {
		return
	}
	m.watches.Wake(m.records.slots[i].key())
}
