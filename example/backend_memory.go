package main

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/seed43327c4c/idempotency/store"
)

// openMemory keeps records in the in-memory store, with cfg's tombstones,
// and payments in a slice: both live and die with this one process.
func openMemory(_ context.Context, cfg config) (store.Store, ledger, func(), error) {
	var opts []store.MemoryOption
	if cfg.tombstones > 0 {
		opts = append(opts, store.WithTombstones(cfg.tombstones))
	}
	return store.NewMemory(opts...), &memoryLedger{}, func() {}, nil
}

// memoryLedger is a ledger for one process: each account's payments, in
// the order they were made, every payment by its ref, and each tally's
// counts.
type memoryLedger struct {
	mu       sync.Mutex
	payments map[string][]payment
	refs     map[string]payment
	counts   map[tally]map[string]int
}

func (l *memoryLedger) Create(_ context.Context, ref, account string, amount int, currency string) (payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.refs[ref]; ok {
		return p, nil
	}
	if l.payments == nil {
		l.payments, l.refs = make(map[string][]payment), make(map[string]payment)
	}
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	l.payments[account] = append(l.payments[account], p)
	l.refs[ref] = p
	return p, nil
}

func (l *memoryLedger) List(_ context.Context, account string) ([]payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]payment{}, l.payments[account]...), nil
}

func (l *memoryLedger) Count(_ context.Context, t tally, id string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = make(map[tally]map[string]int)
	}
	if l.counts[t] == nil {
		l.counts[t] = make(map[string]int)
	}
	l.counts[t][id]++
	return l.counts[t][id], nil
}

func (l *memoryLedger) Counts(_ context.Context, t tally) ([]eventCount, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := []eventCount{}
	for _, id := range slices.Sorted(maps.Keys(l.counts[t])) {
		counts = append(counts, eventCount{ID: id, Count: l.counts[t][id]})
	}
	return counts, nil
}
