package store

import "context"

// keyWatch is what the watches of one key in flight share: the channel
// that Complete, Release or a sweep of the key closes, and how many
// watches have not stopped. Watchers of a key share one channel, so a
// wake-up closes one channel however many wait, and a watch costs one
// allocation (its stop) once the key has a keyWatch.
type keyWatch struct {
	changed  chan struct{}
	watchers int
}

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
	w := m.watches[key]
	if w == nil {
		if m.watches == nil {
			m.watches = make(map[string]*keyWatch)
		}
		w = &keyWatch{changed: make(chan struct{})}
		m.watches[key] = w
	}
	w.watchers++
	return w.changed, func() { m.unwatch(key, w) }, nil
}

// unwatch stops one of w's watches of key: the last one stopped before a
// wake-up lets w go.
func (m *Memory) unwatch(key string, w *keyWatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.watchers--
	if w.watchers == 0 && m.watches[key] == w {
		delete(m.watches, key)
	}
}

// wake closes the channel of the watches of the key in slot i, if any, and
// forgets them: a later Watch of the key, once it is claimed again, gets a
// channel of its own. It is called under the store's lock, and while no
// key is watched it returns before it reads the key.
func (m *Memory) wake(i int32) {
	if len(m.watches) == 0 {
		return
	}
	key := m.records.slots[i].key()
	if w, ok := m.watches[key]; ok {
		close(w.changed)
		delete(m.watches, key)
	}
}
