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

// HashKey returns the hex SHA-256 of key, under which a store that keeps keys
// outside the process files a record, so that no client can make keys collide.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	var hash [2 * sha256.Size]byte
	hex.Encode(hash[:], sum[:])
	return string(hash[:])
}

// Store keeps one record per idempotency key, a key being any string of
// bytes. Every method is safe for concurrent use by many goroutines and, for
// shared backends, by many processes. Lease and retention expiry are decided
// on the store's own clock, never the caller's.
type Store interface {
	// Claim tries to take key for lease under the caller's random token. If
	// key has no record, or an in-flight one without a live lease, Claim
	// creates an in-flight record owned by token and returns it with claimed
	// true; its fence is at least 1 and above every earlier owner's. A Claim
	// by the live lease's own token returns claimed true again, changing
	// nothing (a reply may have been lost). Otherwise Claim returns the
	// existing record with claimed false, a tombstone (StateExpired)
	// included; its Response is read-only.
	Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (rec Record, claimed bool, err error)

	// Renew extends owner's lease on key to lease from now.
	Renew(ctx context.Context, key string, owner Lease, lease time.Duration) error

	// Complete turns owner's in-flight record into a completed one kept for
	// retention; a nil resp marks the key done but not replayable (the
	// request ran; its response was not stored). If owner completed the key
	// already (a reply was lost), Complete returns nil and changes nothing.
	// resp is only lent: the store copies what it keeps before returning.
	Complete(ctx context.Context, key string, owner Lease, resp *Response, retention time.Duration) error

	// Release frees owner's in-flight record for the next Claim.
	Release(ctx context.Context, key string, owner Lease) error
}

// State is where a record is in its life.
type State int

const (
	// StateInFlight means a request holds the key under a lease.
	StateInFlight State = iota + 1
	// StateCompleted means the response is stored for replay.
	StateCompleted
	// StateUnreplayable means the request ran but its response was not
	// stored.
	StateUnreplayable
	// StateExpired means the key completed and its retention ended; only a
	// tombstone remains (Fingerprint and Completed), kept by a store that
	// keeps tombstones, so that a late retry is refused rather than run.
	StateExpired
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateInFlight:
		return "in-flight"
	case StateCompleted:
		return "completed"
	case StateUnreplayable:
		return "unreplayable"
	case StateExpired:
		return "expired"
	default:
		return "unknown"
	}
}

// Lease identifies the owner of an in-flight record: its random Token and the
// Fence the store gave the claim. A key's fences only grow, so a downstream
// system can refuse writes from a lease that was taken over.
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
	// TTL is the lease left while in flight, the retention left once done,
	// the tombstone's time left once expired.
	TTL time.Duration
	// Completed is when the key completed; set only when State is
	// StateExpired.
	Completed time.Time
	// Steps is set only on the record a successful Claim of a StepStore
	// returns: the steps earlier owners of the key recorded, in order.
	// Read-only.
	Steps []Step
}

// Response is a response stored for replay; Body must round-trip unchanged.
type Response struct {
	Status int
	// Header may lose names without values.
	Header http.Header
	Body   []byte
}

// ErrNotOwner is returned by Renew, Complete and Release, which then change
// nothing, when the caller's lease no longer holds the key: it was taken
// over, the record is gone, or it is done (a Renew or Release after Complete).
var ErrNotOwner = errors.New("store: lease not held by this owner")

// ErrEmptyToken is returned by Claim and BeginClaim for an empty token.
var ErrEmptyToken = errors.New("store: empty owner token")

// ErrFull is returned by Claim when a bounded store is full.
var ErrFull = errors.New("store: full")
