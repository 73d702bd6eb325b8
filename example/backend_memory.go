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

// memoryLedger is a ledger for one process.
type memoryLedger struct {
	mu       sync.Mutex
	payments []payment
}

func (l *memoryLedger) Create(_ context.Context, amount int, currency string) (payment, error) {
	p := payment{ID: newPaymentID(), Amount: amount, Currency: currency}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.payments = append(l.payments, p)
	return p, nil
}

func (l *memoryLedger) List(context.Context) ([]payment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]payment{}, l.payments...), nil
}
