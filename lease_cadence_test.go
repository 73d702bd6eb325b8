package idempotency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// renewClock is a memory store that notes when each Claim and Renew
// arrives.
type renewClock struct {
	store.Store
	mu      sync.Mutex
	claimed time.Time
	renews  []time.Duration // after the claim
}

func (s *renewClock) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	s.claimed = time.Now()
	s.mu.Unlock()
	return s.Store.Claim(ctx, key, fp, token, lease)
}

func (s *renewClock) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	s.mu.Lock()
	s.renews = append(s.renews, time.Since(s.claimed))
	s.mu.Unlock()
	return s.Store.Renew(ctx, key, owner, lease)
}

// TestLeaseIsRenewedEveryThirdOfIt: a running handler's lease is renewed
// about a third of the lease after the claim, and again about a third
// after each renewal, so that two more renewals could fail before it
// lapses. The bounds leave room for a slow machine: never before a quarter
// of the lease, and the first by three quarters of it.
func TestLeaseIsRenewedEveryThirdOfIt(t *testing.T) {
	const lease = 1500 * time.Millisecond
	s := &renewClock{Store: store.NewMemory()}
	h := &paymentHandler{delay: lease + lease/4}
	post(idempotency.New(idempotency.WithStore(s), idempotency.WithLease(lease))(h), "k", "{}")

	s.mu.Lock()
	defer s.mu.Unlock()
	require.GreaterOrEqual(t, len(s.renews), 2, "renewals at %v", s.renews)
	require.Less(t, s.renews[0], 3*lease/4, "the first renewal, at %v", s.renews)
	previous := time.Duration(0)
	for _, at := range s.renews {
		require.GreaterOrEqual(t, at-previous, lease/4, "renewals at %v", s.renews)
		previous = at
	}
}
