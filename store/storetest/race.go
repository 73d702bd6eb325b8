package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

const (
	// racers is how many goroutines claim one key at once.
	racers = 16
	// raceRounds is how many keys ConcurrentClaimsOneWinner races on.
	raceRounds = 300
	// takeoverRounds is how many expired keys ConcurrentTakeoversOneWinner
	// races on.
	takeoverRounds = 50
)

// attempt is one racer's Claim and its outcome.
type attempt struct {
	fingerprint string
	token       string
	rec         store.Record
	claimed     bool
	err         error
}

// race has racers goroutines, released at once, claim key with distinct
// fingerprints and tokens. It requires every claim to return without error
// and exactly one to win, and every loser to see the winner's in-flight
// record. It returns the winner's lease.
func race(t *testing.T, s store.Store, key string) store.Lease {
	t.Helper()
	attempts := make([]attempt, racers)
	for i := range attempts {
		attempts[i].fingerprint = fmt.Sprintf("fp-%s-%d", key, i)
		attempts[i].token = newToken()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		a := &attempts[i]
		wg.Go(func() {
			<-start
			a.rec, a.claimed, a.err = s.Claim(t.Context(), key, a.fingerprint, a.token, longLease)
		})
	}
	close(start)
	wg.Wait()

	var winner *attempt
	for i := range attempts {
		a := &attempts[i]
		require.NoError(t, a.err, "concurrent Claim(%q)", key)
		if a.claimed {
			require.Nil(t, winner, "two concurrent claims on %q won", key)
			winner = a
		}
	}
	require.NotNil(t, winner, "no concurrent claim on %q won", key)
	require.Equal(t, winner.token, winner.rec.Owner.Token)
	for _, a := range attempts {
		if a.claimed {
			continue
		}
		require.Equal(t, store.StateInFlight, a.rec.State, "a losing claim on %q", key)
		require.Equal(t, winner.fingerprint, a.rec.Fingerprint, "a losing claim on %q sees the winner's record", key)
		require.Empty(t, a.rec.Owner.Token, "a losing claim must not reveal the owner's token")
		requireTTL(t, a.rec.TTL, longLease)
	}
	return winner.rec.Owner
}

// testConcurrentClaimsOneWinner: of racers goroutines claiming a new key at
// the same moment, exactly one wins and the others see its record, on each
// of raceRounds keys.
func testConcurrentClaimsOneWinner(t *testing.T, s store.Store) {
	for round := range raceRounds {
		owner := race(t, s, fmt.Sprint("race-", round))
		require.GreaterOrEqual(t, owner.Fence, int64(1))
	}
}

// testConcurrentTakeoversOneWinner: of racers goroutines taking over a key
// whose lease has expired, exactly one wins, with a fencing number higher
// than the expired owner's, on each of takeoverRounds keys.
func testConcurrentTakeoversOneWinner(t *testing.T, s store.Store) {
	expired := make([]store.Lease, takeoverRounds)
	for i := range expired {
		expired[i] = mustClaim(t, s, fmt.Sprint("race-", i), "fp-expired", shortLease)
	}
	sleepPastShortLease()
	for i, old := range expired {
		owner := race(t, s, fmt.Sprint("race-", i))
		require.Greater(t, owner.Fence, old.Fence, "a takeover gets a higher fencing number")
	}
}
