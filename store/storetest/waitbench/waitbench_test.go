package waitbench

import (
	"testing"

	"github.com/seed43327c4c/idempotency/store"
)

// BenchmarkMemory is Run on the memory store, the reference the other
// stores' benchmarks compare with.
func BenchmarkMemory(b *testing.B) { Run(b, store.NewMemory()) }
