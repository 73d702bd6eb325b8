package main

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/seed43327c4c/idempotency/store"
)

// openMemory keeps records in the in-memory store and payments in a
// slice: both live and die with this one process.
func openMemory(context.Context, config) (store.Store, ledger, func(), error) {
	return store.NewMemory(), &memoryLedger{}, func() {}, nil
}

// memoryLedger is a ledger for one process: each account's payments, in
// the order they were made, every payment by its ref, and each event's
// count.
type memoryLedger struct {
	mu       sync.Mutex
	payments map[string][]payment
	refs     map[string]payment
	events   map[string]int
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

func (l *memoryLedger) CountEvent(_ context.Context, id string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.events == nil {
		l.events = make(map[string]int)
	}
	l.events[id]++
	return l.events[id], nil
}

func (l *memoryLedger) Events(context.Context) ([]eventCount, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	events := []eventCount{}
	for _, id := range slices.Sorted(maps.Keys(l.events)) {
		events = append(events, eventCount{ID: id, Count: l.events[id]})
	}
	return events, nil
}
