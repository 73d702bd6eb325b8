// Package keywatch keeps a store's watches of keys in flight.
package keywatch

import (
	"iter"
	"maps"
)

// Set is the watched keys of a store; its zero value is empty. It is not
// safe for concurrent use.
type Set struct {
	keys map[string]*Watch
}

// Watch is the channel the watchers of one key share.
type Watch struct {
	changed  chan struct{}
	watchers int
}

// Changed returns the channel a wake-up closes.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// Add adds a watcher of key and returns the key's watch.
func (s *Set) Add(key string) *Watch {
	w := s.keys[key]
	if w == nil {
		if s.keys == nil {
			s.keys = make(map[string]*Watch)
		}
		w = &Watch{changed: make(chan struct{})}
		s.keys[key] = w
	}
	w.watchers++
	return w
}

// Stop stops one watcher of w, the watch of key that Add returned.
func (s *Set) Stop(key string, w *Watch) {
	w.watchers--
	if w.watchers == 0 && s.keys[key] == w {
		delete(s.keys, key)
	}
}

// Wake closes the channel of key's watch, if any, and forgets it.
func (s *Set) Wake(key string) {
	if w, ok := s.keys[key]; ok {
		close(w.changed)
		delete(s.keys, key)
	}
}

// WakeWatch wakes w, a watch of key, unless it was woken already.
func (s *Set) WakeWatch(key string, w *Watch) {
	if s.keys[key] == w {
		close(w.changed)
		delete(s.keys, key)
	}
}

// Watched returns key's watch, or nil if key is not watched.
func (s *Set) Watched(key string) *Watch { return s.keys[key] }

// Len returns how many keys are watched.
func (s *Set) Len() int { return len(s.keys) }

// All yields each watched key with its watch; the loop may wake them.
func (s *Set) All() iter.Seq2[string, *Watch] { return maps.All(s.keys) }
