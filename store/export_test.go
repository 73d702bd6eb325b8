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
