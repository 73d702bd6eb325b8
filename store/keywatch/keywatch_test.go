package keywatch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// closed reports whether w's channel is closed.
func closed(w *Watch) bool {
	select {
	case <-w.Changed():
		return true
	default:
		return false
	}
}

// TestAdd: the watchers of one key share its watch, other keys get their
// own, and the zero Set is ready.
func TestAdd(t *testing.T) {
	var s Set
	require.Zero(t, s.Len())
	a, again, b := s.Add("a"), s.Add("a"), s.Add("b")
	require.Same(t, a, again, "watchers of a key share its watch")
	require.NotSame(t, a, b)
	require.Equal(t, 2, s.Len())
	require.Same(t, a, s.Watched("a"))
	require.Nil(t, s.Watched("c"))
	require.False(t, closed(a) || closed(b), "a new watch is open")
}

// TestStop: the last watcher stopped lets the key go; a watcher stopped
// after a wake-up leaves a newer watch of its key alone.
func TestStop(t *testing.T) {
	t.Run("before a wake-up", func(t *testing.T) {
		var s Set
		w := s.Add("k")
		s.Add("k")
		s.Stop("k", w)
		require.Same(t, w, s.Watched("k"), "one watcher is left")
		s.Stop("k", w)
		require.Zero(t, s.Len())
		require.False(t, closed(w), "stopping wakes nobody")
	})
	t.Run("after a wake-up", func(t *testing.T) {
		var s Set
		old := s.Add("k")
		s.Wake("k")
		newer := s.Add("k")
		s.Stop("k", old)
		require.Same(t, newer, s.Watched("k"), "the newer watch is kept")
	})
}

// TestWake: Wake closes the key's watch and forgets it, so that the next
// Add gets a new one; waking a key nobody watches does nothing.
func TestWake(t *testing.T) {
	var s Set
	w, other := s.Add("k"), s.Add("other")
	s.Wake("missing")
	s.Wake("k")
	require.True(t, closed(w))
	require.False(t, closed(other), "another key's watch stays open")
	require.Nil(t, s.Watched("k"))
	require.NotSame(t, w, s.Add("k"), "a later watch of the key is new")
}

// TestWakeWatch: WakeWatch closes the watch it is given while it is its
// key's, and leaves a newer watch of the key alone.
func TestWakeWatch(t *testing.T) {
	var s Set
	old := s.Add("k")
	s.WakeWatch("k", old)
	require.True(t, closed(old))
	require.Zero(t, s.Len())
	newer := s.Add("k")
	s.WakeWatch("k", old) // woken already: must not close it twice
	require.False(t, closed(newer), "the newer watch stays open")
	require.Same(t, newer, s.Watched("k"))
}

// TestAll: All yields every watched key with its watch, and the loop may
// wake them.
func TestAll(t *testing.T) {
	var s Set
	want := map[string]*Watch{"a": s.Add("a"), "b": s.Add("b")}
	got := map[string]*Watch{}
	for key, w := range s.All() {
		got[key] = w
		s.WakeWatch(key, w)
	}
	require.Equal(t, want, got)
	require.Zero(t, s.Len())
	for range s.All() {
		t.Fatal("an empty set yields nothing")
	}
}
