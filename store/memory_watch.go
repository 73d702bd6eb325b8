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

// Watch implements Watcher. The channel of a key not in flight under a live
// lease is closed at once; otherwise it is closed when the key is
// completed, released, or swept after its lease ended. It never fails.
func (m *Memory) Watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	key = keptKey(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.records.find(m.records.hash(key), key)
	if i < 0 || m.records.at(i).state != StateInFlight || m.records.at(i).expires <= m.now() {
		return closedWatch, func() {}, nil
	}
	w := m.watches.Add(key)
	return w.Changed(), func() { m.unwatch(key, w) }, nil
}

// unwatch stops one of w's watchers of key.
func (m *Memory) unwatch(key string, w *keywatch.Watch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watches.Stop(key, w)
}

// wake wakes and forgets the watches of the key in slot i, under the
// store's lock.
func (m *Memory) wake(i int32) {
	if m.watches.Len() == 0 {
		return
	}
	m.watches.Wake(m.records.at(i).key())
}
