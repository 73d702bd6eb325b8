package redisstore

import (
	"context"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping implements store.Pinger with a PING, which a Cluster client sends to
// one of its primaries and a Sentinel client to the primary.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}
