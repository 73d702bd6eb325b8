package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// claimRequest is a Claim's arguments, durations in milliseconds.
type claimRequest struct {
	keys               []string
	fingerprint, token string
	leaseMs, lifeMs    int64
	tombs              int // 1 if the store keeps tombstones, else 0
}

// claim decides c through client, with the claim script when claimAtOnce
// cannot.
func (s *Store) claim(ctx context.Context, client redis.Cmdable, c claimRequest) (store.Record, bool, error) {
	if s.atOnce.Load() {
		call := &claimCall{c: c}
		s.sendClaims(ctx, client, []*claimCall{call})
		if call.err != nil || call.decided {
			return call.rec, call.claimed, call.err
		}
	}
	return s.claimByScript(ctx, client, c)
}

// claimByScript decides c with the claim script.
func (s *Store) claimByScript(ctx context.Context, client redis.Cmdable, c claimRequest) (store.Record, bool, error) {
	v, err := claimScript.Run(ctx, client, c.keys, c.fingerprint, c.token, c.leaseMs, c.lifeMs, c.lifeMs-c.leaseMs, c.tombs).Slice()
	if err != nil {
		return store.Record{}, false, err
	}
	return decodeClaim(&reply{v: v}, c.fingerprint, c.token)
}

// claimCall is a claim tried without a script (see sendClaims); decided is
// false for a takeover, and for a call whose part of a shared pipeline
// failed, which the claim script then decides.
type claimCall struct {
	c                claimRequest
	rec              store.Record
	claimed, decided bool
	err              error
}

// Settle implements batch.Item.
func (call *claimCall) Settle(err error) { call.err = err }

// sendClaims tries to decide calls without a script, each with PTTL and SET
// NX GET, all in one pipeline. A call's two commands are not atomic
// together, but the SET alone decides what is written and answered: a
// change between them can only put the answer's time left off (see
// docs/redis.md). PTTL goes first because go-redis takes a pipeline's first
// reply as its error, and classifies an error at some cost: the SET's nil
// reply, a won claim, is one.
func (s *Store) sendClaims(ctx context.Context, client redis.Cmdable, calls []*claimCall) {
	cmds := make([]*redis.Cmd, 2*len(calls))
	_, _ = client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, call := range calls {
			c := call.c
			cmds[2*i] = p.Do(ctx, "pttl", c.keys[0])
			cmds[2*i+1] = p.Do(ctx, "set", c.keys[0], encodeInFlight(c.fingerprint, c.token, c.lifeMs-c.leaseMs), "nx", "get", "px", c.lifeMs)
		}
		return nil
	})
	for i, call := range calls {
		call.rec, call.claimed, call.decided, call.err = s.decideClaim(call.c, cmds[2*i], cmds[2*i+1])
	}
}

// claimAlone is sendClaims for call by itself.
func (s *Store) claimAlone(ctx context.Context, call *claimCall) {
	s.sendClaims(ctx, s.client, []*claimCall{call})
}

// sendSharedClaims is sendClaims for a batch of calls: one whose part of
// the shared pipeline failed is left to the claim script, for its caller
// alone (see claimBatched).
func (s *Store) sendSharedClaims(ctx context.Context, calls []*claimCall) (again []*claimCall) {
	s.sendClaims(ctx, s.client, calls)
	for _, call := range calls {
		if call.err != nil {
			call.decided, call.err = false, nil
		}
	}
	return nil
}

// decideClaim reads the replies of c's PTTL and SET NX GET.
func (s *Store) decideClaim(c claimRequest, ttl, set *redis.Cmd) (rec store.Record, claimed, decided bool, err error) {
	fingerprint, token := c.fingerprint, c.token
	v, err := set.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return claimedRecord(fingerprint, token, 1, time.Duration(c.leaseMs)*time.Millisecond), true, true, nil
	case redis.HasErrorPrefix(err, "ERR syntax error"): // a server before 7.0: NX with GET
		s.atOnce.Store(false)
		return store.Record{}, false, false, nil
	case redis.HasErrorPrefix(err, "OOM"): // the script still answers a claim that only reads
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
		rec := claimedRecord(fingerprint, token, r.fence, lease)
		rec.Steps, err = decodeSteps(r.body)
		return rec, true, true, err
	default:
		rec, err := r.stored(lease)
		return rec, false, true, err
	}
}

// claimedRecord is the record a claim under token won.
func claimedRecord(fingerprint, token string, fence int64, left time.Duration) store.Record {
	return store.Record{State: store.StateInFlight, Fingerprint: fingerprint, Owner: store.Lease{Token: token, Fence: fence}, TTL: left}
}

// foundRecord is a record a claim found and did not take; header is in
// headercodec's encoding.
func foundRecord(state store.State, fingerprint string, fence int64, ttl time.Duration, status int, header, body string) (store.Record, error) {
	rec := store.Record{State: state, Fingerprint: fingerprint, Owner: store.Lease{Fence: fence}, TTL: ttl}
	if state != store.StateCompleted {
		return rec, nil
	}
	h, err := headercodec.Decode([]byte(header))
	rec.Response = &store.Response{Status: status, Header: h, Body: []byte(body)}
	return rec, err
}
