package store

// MemoryLen reports how many records m holds, expired ones not yet swept
// included, for tests of sweeping.
func MemoryLen(m *Memory) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.records.len()
}

// MemoryBytes reports the response bytes m counts against WithMaxBytes.
func MemoryBytes(m *Memory) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// MemoryArena reports the bytes of m's arena chunks (held) and of the
// record data that lies in them (live).
func MemoryArena(m *Memory) (held, live int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.arena.held, m.arena.live
}

// MemoryWatchedKeys reports how many keys m holds watches of.
func MemoryWatchedKeys(m *Memory) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watches.Len()
}
