package main

import (
	"context"
	"sync"

	"github.com/seed43327c4c/idempotency/store"
)

// openMemory keeps records with the middleware's default in-memory store
// and payments in a slice: both live and die with this one process.
func openMemory(context.Context, config) (store.Store, ledger, func(), error) {
	return nil, &memoryLedger{}, func() {}, nil
}

// memoryLedger is a ledger for one process: each account's payments, in
// the order they were made.
type memoryLedger struct {
	mu       sync.Mutex
	payments map[string][]payment
}

func (l *memoryLedger) Create(_ context.Context, account string, amount int, currency string) (payment, error) {
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.payments == nil {
		l.payments = make(map[string][]payment)
	}
	l.payments[account] = append(l.payments[account], p)
	return p, nil
}

func (l *memoryLedger) List(_ context.Context, account string) ([]payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]payment{}, l.payments[account]...), nil
}
