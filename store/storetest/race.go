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
	// crowdKeys is how many keys ManyKeysAtOnce has racers claim, each
	// racer all of them in an order of its own.
	crowdKeys = 64
)

// attempt is one racer's Claim and its outcome.
type attempt struct {
	fingerprint string
	token       string
	rec         store.Record
	claimed     bool
	err         error
}

// race has racers goroutines claim key at once, requires exactly one to
// win and the others to see its record, and returns the winner's lease.
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

	winner := &attempts[oneWinner(t, key, len(attempts), func(i int) (bool, error) {
		return attempts[i].claimed, attempts[i].err
	})]
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

// oneWinner requires none of n claims of key, outcome(i) being the i-th's,
// to have erred and exactly one to have won, and returns its index.
func oneWinner(t *testing.T, key string, n int, outcome func(i int) (won bool, err error)) int {
	t.Helper()
	winner := -1
	for i := range n {
		won, err := outcome(i)
		require.NoError(t, err, "concurrent claim of %q", key)
		if won {
			require.Equal(t, -1, winner, "two concurrent claims of %q won", key)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no concurrent claim of %q won", key)
	return winner
}

// testConcurrentClaimsOneWinner: of concurrent claims of a new key,
// exactly one wins.
func testConcurrentClaimsOneWinner(t *testing.T, s store.Store) {
	for round := range raceRounds {
		owner := race(t, s, fmt.Sprint("race-", round))
		require.GreaterOrEqual(t, owner.Fence, int64(1))
	}
}

// testConcurrentTakeoversOneWinner: of concurrent takeovers of an expired
// lease, exactly one wins, with a higher fencing number.
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

// testManyKeysAtOnce: racers claim many keys at once, each in its own
// order, and a key's winner completes it at once: every key has one
// winner, whose completion stands, however the store groups the calls
// (one batch may hold several keys, and claims of one key in another
// order).
func testManyKeysAtOnce(t *testing.T, s store.Store) {
	wins := make([][]bool, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r := range racers {
		wins[r] = make([]bool, crowdKeys)
		wg.Go(func() {
			<-start
			for i := range crowdKeys {
				k := (i*(2*r+1) + r) % crowdKeys // each racer walks the keys in a different order
				key := fmt.Sprint("crowd-", k)
				rec, claimed, err := s.Claim(t.Context(), key, "fp-crowd", newToken(), longLease)
				if err == nil && claimed {
					err = s.Complete(t.Context(), key, rec.Owner, keyedResponse(key), retention)
				}
				if err != nil {
					errs[r] = fmt.Errorf("racer %d, %q: %w", r, key, err)
					return
				}
				wins[r][k] = claimed
			}
		})
	}
	close(start)
	wg.Wait()
	for k := range crowdKeys {
		key := fmt.Sprint("crowd-", k)
		oneWinner(t, key, racers, func(r int) (bool, error) { return wins[r][k], errs[r] })
		requireCompleted(t, s, key, "fp-crowd", keyedResponse(key))
	}
}

// txAttempt is one racer's BeginClaim, or Claim, and its outcome.
type txAttempt struct {
	plain bool
	rec   store.Record
	tx    *openTx
	won   bool
	err   error
}

// raceTx is race with plainRacers of the racers calling Claim and the
// others BeginClaim, all returning at once. The winner finishes the key
// without a response; it returns the winner's fencing number.
func raceTx(t *testing.T, s store.TxStore, key string) int64 {
	t.Helper()
	attempts := make([]txAttempt, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		a := &attempts[i]
		a.plain = i < plainRacers
		fingerprint := fmt.Sprintf("fp-%s-%d", key, i)
		wg.Go(func() {
			<-start
			if a.plain {
				a.rec, a.won, a.err = s.Claim(t.Context(), key, fingerprint, newToken(), longLease)
				return
			}
			var tx store.Tx
			_, a.rec, tx, a.err = s.BeginClaim(t.Context(), key, fingerprint, newToken())
			if tx != nil {
				// Tracked here, so that cleanup ends it even if the test
				// stops waiting for the others.
				a.tx, a.won = track(t, tx, a.rec.Owner), true
			}
		})
	}
	close(start)
	atOnce(t, fmt.Sprintf("%d concurrent claims of %q", racers, key), wg.Wait)

	winner := &attempts[oneWinner(t, key, len(attempts), func(i int) (bool, error) {
		return attempts[i].won, attempts[i].err
	})]
	for _, a := range attempts {
		if a.won {
			continue
		}
		require.Equal(t, store.StateInFlight, a.rec.State, "a losing claim of %q", key)
		require.Empty(t, a.rec.Owner.Token, "a losing claim must not reveal the owner's token")
	}
	if winner.plain {
		complete(t, s, key, winner.rec.Owner, nil)
	} else {
		winner.tx.commit(t, nil, retention)
	}
	require.Equal(t, store.StateUnreplayable, mustLose(t, s, key, "fp-after").State, "%q after its winner finished", key)
	return winner.rec.Owner.Fence
}

// testTxConcurrentClaimsOneWinner: of concurrent BeginClaims and Claims of
// a new or expired key, exactly one wins, a takeover with a higher fencing
// number.
func testTxConcurrentClaimsOneWinner(t *testing.T, s store.TxStore) {
	expired := make([]store.Lease, txRaceRounds/2)
	for i := range expired {
		expired[i] = mustClaim(t, s, fmt.Sprint("expired-", i), "fp-expired", shortLease)
	}
	sleepPastShortLease()
	for round := range txRaceRounds {
		require.GreaterOrEqual(t, raceTx(t, s, fmt.Sprint("new-", round)), int64(1))
	}
	for i, old := range expired {
		require.Greater(t, raceTx(t, s, fmt.Sprint("expired-", i)), old.Fence, "a takeover gets a higher fencing number")
	}
}
