package mysqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

func TestNewSlots(t *testing.T) {
	for maxOpen, want := range map[int]int{1: 1, 2: 1, 4: 3, 8: 6, 20: 15} {
		require.Equal(t, want, cap(newSlots(maxOpen)), "pool of %d", maxOpen)
	}
	require.Nil(t, newSlots(0), "an unbounded pool")
}

// TestOwnersDoNotQueueBehindClaims: with every claim slot of a pool of 4
// held by an open transaction, a new claim waits until its deadline, while
// the owner's renew, complete and release of an earlier plain claim are
// answered.
func TestOwnersDoNotQueueBehindClaims(t *testing.T) {
	s := &TxStore{Store: newTestStoreOn(t, openDB(t, testConfig(t), 4))}
	ctx := context.Background()
	owners := []store.Record{mustClaim(t, s, "a", "fp", longLease), mustClaim(t, s, "b", "fp", longLease)}
	for _, key := range []string{"x", "y", "z"} {
		_, _, tx, err := s.BeginClaim(ctx, key, "fp", newToken())
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	}

	waiting, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, _, err := s.Claim(waiting, "c", "fp", newToken(), longLease)
	require.ErrorIs(t, err, context.DeadlineExceeded, "every claim slot is held")

	answered, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, s.Renew(answered, "a", owners[0].Owner, longLease))
	require.NoError(t, s.Complete(answered, "a", owners[0].Owner, nil, longLease))
	require.NoError(t, s.Release(answered, "b", owners[1].Owner))
}
