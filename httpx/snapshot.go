package httpx

import (
	"net/http"
	"sync"
)

// snapshot is a Recorder's copy of a header: the map and one array for
// every value, pooled for later Recorders to reuse.
type snapshot struct {
	header http.Header
	values []string
	names  int
}

// maxPooledNames is the most header names a pooled snapshot may have held:
// a map does not shrink, and clearing one costs as much as its largest size.
const maxPooledNames = 32

var snapshots = sync.Pool{New: func() any { return &snapshot{header: make(http.Header)} }}

// takeSnapshot returns a copy of h, as h.Clone returns it. A value slice
// made before the array grew keeps pointing into the old one, whose values
// are copies all the same.
func takeSnapshot(h http.Header) *snapshot {
	s := snapshots.Get().(*snapshot)
	values := s.values[:0]
	for name, vv := range h {
		if len(vv) == 0 {
			s.header[name] = vv[:0:0] // nil stays nil, empty stays empty
			continue
		}
		start := len(values)
		values = append(values, vv...)
		s.header[name] = values[start:len(values):len(values)]
	}
	s.values, s.names = values, len(h)
	return s
}

// release hands s back to the pool, unless it grew too large.
func (s *snapshot) release() {
	if s.names > maxPooledNames {
		return
	}
	clear(s.header)
	clear(s.values)
	s.values = s.values[:0]
	snapshots.Put(s)
}
