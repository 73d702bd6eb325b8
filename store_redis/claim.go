package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// claimRequest is what a Claim asks: keys, fingerprint and token, the lease and
// the in-flight record's lifetime in milliseconds.
type claimRequest struct {
	keys               []string
	fingerprint, token string
	leaseMs, lifeMs    int64
}

// claim decides c through client: at once when it can, and otherwise with
// the claim script.
func (s *Store) claim(ctx context.Context, client redis.Cmdable, c claimRequest) (store.Record, bool, error) {
	if s.atOnce.Load() {
		rec, claimed, decided, err := s.claimAtOnce(ctx, client, c)
		if err != nil || decided {
			return rec, claimed, err
		}
	}
	v, err := claimScript.Run(ctx, client, c.keys, c.fingerprint, c.token, c.leaseMs, c.lifeMs, c.lifeMs-c.leaseMs).Slice()
	if err != nil {
		return store.Record{}, false, err
	}
	return decodeClaim(&reply{v: v}, c.fingerprint, c.token)
}

// claimAtOnce tries to decide a claim without a script, in one pipeline
// of two commands: SET NX GET creates the record if the key has none and
// returns the one it holds otherwise, and PTTL tells the time left on it.
// A key with no record is claimed (fence 1); a done record, or one in
// flight under a live lease, is answered. Only what needs a decision
// written atomically is left to the claim script: decided is then false.
// The two commands are not atomic together: the SET alone decides what is
// written and what is answered, and PTTL tells how long the key lives
// once the SET has run. A change in between (another client's commands
// may run there) leaves the decision right and can only put the time left
// off for that answer: a completion makes an in-flight record's lease
// look as long as the retention, and an expiry followed by a new claim
// gives a done record the new record's time left.
func (s *Store) claimAtOnce(ctx context.Context, client redis.Cmdable, c claimRequest) (rec store.Record, claimed, decided bool, err error) {
	fingerprint, token := c.fingerprint, c.token
	var set, ttl *redis.Cmd
	_, _ = client.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.Do(ctx, "set", c.keys[0], encodeInFlight(fingerprint, token, c.lifeMs-c.leaseMs), "nx", "get", "px", c.lifeMs)
		ttl = p.Do(ctx, "pttl", c.keys[0])
		return nil
	})
	v, err := set.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return claimedRecord(fingerprint, token, 1, time.Duration(c.leaseMs)*time.Millisecond), true, true, nil
	case redis.HasErrorPrefix(err, "ERR syntax error"): // a server before 7.0: NX with GET
		s.atOnce.Store(false)
		return store.Record{}, false, false, nil
	case redis.HasErrorPrefix(err, "OOM"): // memory is full: the script still answers a claim that only reads
		return store.Record{}, false, false, nil
	case err != nil:
		return store.Record{}, false, true, err
	}
	r, err := decodeRecord(v)
	if err != nil {
		return store.Record{}, false, true, err
	}
	left, err := ttl.Int64()
	if err != nil {
		return store.Record{}, false, true, err
	}
	if r.state != store.StateInFlight {
		rec, err := r.stored(time.Duration(left) * time.Millisecond)
		return rec, false, true, err
	}
	lease := time.Duration(left-r.abandoned) * time.Millisecond
	switch {
	case r.token == "" || lease <= 0: // released or lapsed: a takeover, decided by the script
		return store.Record{}, false, false, nil
	case r.token == token: // this claim sent again after its reply was lost
		return claimedRecord(fingerprint, token, r.fence, lease), true, true, nil
	default:
		rec, err := r.stored(lease)
		return rec, false, true, err
	}
}

// claimedRecord is the record a claim under token won: in flight, with
// fence and the lease left.
func claimedRecord(fingerprint, token string, fence int64, left time.Duration) store.Record {
	return store.Record{State: store.StateInFlight, Fingerprint: fingerprint, Owner: store.Lease{Token: token, Fence: fence}, TTL: left}
}

// foundRecord is a record a claim found and did not take, with ttl the
// time left on it; a completed one carries its response, whose header is
// in headercodec's encoding.
func foundRecord(state store.State, fingerprint string, fence int64, ttl time.Duration, status int, header, body string) (store.Record, error) {
	rec := store.Record{State: state, Fingerprint: fingerprint, Owner: store.Lease{Fence: fence}, TTL: ttl}
	if state != store.StateCompleted {
		return rec, nil
	}
	h, err := headercodec.Decode([]byte(header))
	rec.Response = &store.Response{Status: status, Header: h, Body: []byte(body)}
	return rec, err
}
