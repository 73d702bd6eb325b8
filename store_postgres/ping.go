package pgstore

import (
	"context"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping implements store.Pinger: one of the pool's connections, idle or new,
// answers an empty statement.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgstore: ping: %w", err)
	}
	return nil
}
