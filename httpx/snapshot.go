package httpx

import (
	"net/http"
	"sync"
)

// snapshot is the memory a Recorder's header snapshot lives in: the map,
// and one array for every value, as http.Header.Clone makes. Recorders
// hand it back (Release) for later ones to reuse, so that recording a
// response does not allocate them again.
type snapshot struct {
	header http.Header
	values []string
	names  int // how many names the map held when taken
}

// maxPooledNames is the most header names a snapshot may have held and
// still be reused: a map does not shrink, and clearing one costs as much
// as its largest size.
const maxPooledNames = 32

// snapshots holds the snapshots (*snapshot) of Released Recorders.
var snapshots = sync.Pool{New: func() any { return &snapshot{header: make(http.Header)} }}

// takeSnapshot returns a copy of h, as h.Clone returns it (names with nil
// values kept nil), in memory from the pool. The values go into one array,
// which grows as they are copied: a value slice made before it grew keeps
// pointing into the old array, whose values are copies all the same.
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

// release hands s back to the pool, cleared, unless it grew too large to
// be worth keeping.
func (s *snapshot) release() {
	if s.names > maxPooledNames {
		return
	}
	clear(s.header)
	clear(s.values)
	s.values = s.values[:0]
	snapshots.Put(s)
}
