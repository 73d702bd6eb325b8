// Package store defines what the idempotency middleware needs from a storage
// backend: the Store interface, its records and sentinel errors, and the
// default in-memory store. A backend is correct when it passes the
// conformance suite in store/storetest.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// HashKey returns the SHA-256 of key in hex, under which a store that keeps
// keys outside the process keeps each record: a cryptographic hash keeps
// apart keys a client chooses to collide.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Store keeps one record per idempotency key, a key being any string of
// bytes. Every method is safe for concurrent use by many goroutines and, for
// shared backends, by many processes. Lease and retention expiry are decided
// on the store's own clock, never the caller's.
type Store interface {
	// Claim tries to take key for the lease duration under the caller's
	// random token (an empty one is refused with ErrEmptyToken). If key has
	// no record, or an in-flight one with an expired lease, Claim creates an
	// in-flight record owned by token and returns it with claimed true. Its
	// fencing number is at least 1 and higher than any earlier owner's,
	// after a takeover or a release too. A Claim under the token holding the
	// live lease reports the key claimed again, changing nothing (a reply
	// may have been lost). Otherwise Claim returns the existing record with
	// claimed false, without its owner's token; its Response is read-only.
	Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (rec Record, claimed bool, err error)

	// Renew extends owner's lease on key to lease from now. If owner no
	// longer holds the key, Renew returns ErrNotOwner and changes nothing.
	Renew(ctx context.Context, key string, owner Lease, lease time.Duration) error

	// Complete turns owner's in-flight record into a completed one kept for
	// retention. A nil resp marks the key done but not replayable: the
	// request ran, and duplicates must not run it again, but its response
	// was not stored. If owner completed the key already (a call sent
	// again after its reply was lost), Complete returns nil and changes
	// nothing. If owner no longer holds the key, it returns ErrNotOwner and
	// changes nothing.
	//
	// resp is only lent: a store copies or encodes what it keeps of it
	// before Complete returns, since the caller reuses the memory of its
	// header and body.
	Complete(ctx context.Context, key string, owner Lease, resp *Response, retention time.Duration) error

	// Release frees owner's in-flight record: the next Claim wins, with a
	// higher fencing number. If owner no longer holds the key, Release
	// returns ErrNotOwner and changes nothing.
	Release(ctx context.Context, key string, owner Lease) error
}

// State is where a record is in its life.
type State int

const (
	// StateInFlight means a request holds the key under a lease.
	StateInFlight State = iota + 1
	// StateCompleted means the response is stored for replay.
	StateCompleted
	// StateUnreplayable means the request finished but its response was
	// not stored.
	StateUnreplayable
)

// String returns the state's name, as logs show it.
func (s State) String() string {
	switch s {
	case StateInFlight:
		return "in-flight"
	case StateCompleted:
		return "completed"
	case StateUnreplayable:
		return "unreplayable"
	default:
		return "unknown"
	}
}

// Lease identifies the owner of an in-flight record: its random Token and
// the Fence number the store gave the claim. A key's fencing numbers only
// grow, so a downstream system can refuse writes from an owner whose lease
// was taken over.
type Lease struct {
	Token string
	Fence int64
}

// Record is what a store keeps for one key.
type Record struct {
	State State
	// Fingerprint is the hash of the request that claimed the key.
	Fingerprint string
	// Owner's Token is set only on the record a successful Claim returns.
	Owner Lease
	// Response is set only when State is StateCompleted.
	Response *Response
	// TTL is the time left of the lease while in flight, of the retention
	// once done.
	TTL time.Duration
}

// Response is a response stored for replay; Body must round-trip unchanged.
type Response struct {
	Status int
	// Header holds the headers to replay; a store may drop a name without
	// values.
	Header http.Header
	Body   []byte
}

// ErrNotOwner is returned by Renew, Complete and Release when the caller's
// lease no longer holds the key: it was taken over, the record is gone,
// or it is done (a Renew or Release after the owner's Complete).
var ErrNotOwner = errors.New("store: lease not held by this owner")

// ErrEmptyToken is returned by Claim and BeginClaim when the caller's token
// is empty.
var ErrEmptyToken = errors.New("store: empty owner token")

// ErrFull is returned by Claim when a bounded store has no room for another
// record.
var ErrFull = errors.New("store: full")
