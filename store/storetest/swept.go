package storetest

import (
	"context"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// SweptBeforeClaims returns s with deleteExpired (a SQL store's
// DeleteExpired) run, for one batch of 1000, before each of its claims, so
// that a suite meets what the store's sweeper leaves (a tombstone without
// its response, say), not only the rows a claim reads as they are.
func SweptBeforeClaims(s store.Store, deleteExpired func(ctx context.Context, batch int) (int, error)) store.Store {
	return sweptStore{Store: s, deleteExpired: deleteExpired}
}

type sweptStore struct {
	store.Store
	deleteExpired func(ctx context.Context, batch int) (int, error)
}

func (s sweptStore) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if _, err := s.deleteExpired(ctx, 1000); err != nil {
		return store.Record{}, false, err
	}
	return s.Store.Claim(ctx, key, fingerprint, token, lease)
}
