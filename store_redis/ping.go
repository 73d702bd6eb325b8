package redisstore

import (
	"context"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping implements store.Pinger with a PING, which a Cluster client sends to
// one of its primaries and a Sentinel client to the primary; a store that
// has not yet asked the server for replicas asks it then, so that a
// readiness probe settles Replication before the first request.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	if _, err := s.replication(ctx); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}
