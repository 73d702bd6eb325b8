// Package store defines what the idempotency middleware needs from a storage
// backend: a small Store interface, the records it keeps, and the sentinel
// errors every backend translates its driver's errors into.
//
// A backend is correct when it passes the conformance suite in
// store/storetest. The in-memory store in this package is the default; the
// Redis, Postgres and SQLite stores live in store_redis, store_postgres and
// store_sqlite.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// HashKey returns the SHA-256 of key in hex: 64 bytes from 0-9 and a-f,
// whatever key's length and bytes. Being cryptographic, it keeps keys
// apart even against a client that chooses its key to land on another
// caller's record. A store that keeps keys outside the process keeps each
// record under HashKey of its key (or the 32 bytes it spells).
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Store keeps one record per idempotency key. Every method takes a context
// first and is safe for concurrent use by many goroutines and, for shared
// backends, by many processes. Lease and retention expiry are decided on the
// store's own clock, never the caller's.
//
// A key is any string of bytes. The middleware's keys are binary (its
// fields after their lengths: see the idempotency package) and as long as
// the client's key, the route and the scope together. A store that keeps
// keys outside the process, where their length or bytes matter, keeps
// each under HashKey(key), as the Redis, Postgres and SQLite stores do.
type Store interface {
	// Claim tries to take key for a request whose fingerprint is given,
	// under the caller's random token, for the lease duration. An empty
	// token is refused with ErrEmptyToken.
	//
	// If key has no record, or its record is in flight with an expired
	// lease, Claim creates an in-flight record owned by token and returns it
	// with claimed true. Fencing numbers are at least 1, and a takeover of
	// an expired lease, or a claim after a release, gets a higher one than
	// the previous owner's: a store keeps a released or abandoned record's
	// fencing number for a while (or draws numbers from one counter), so
	// that they never go back.
	//
	// A Claim under the token that holds the key's live lease reports the
	// key claimed again, with that lease, and changes nothing: a client
	// library may send a call again when its reply was lost, and the first
	// call may have won.
	//
	// Otherwise Claim changes nothing and returns the existing record with
	// claimed false: in flight (with the lease time remaining in TTL) or
	// completed (with its response, if replayable). The existing owner's
	// token is never returned. The returned Response is read-only: a store
	// may hand the same one to every duplicate, and the caller must not
	// change it.
	Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (rec Record, claimed bool, err error)

	// Renew extends the lease of key to lease from now, if owner still
	// holds it. If the record is gone, completed, or held under another
	// token or fencing number, Renew returns ErrNotOwner and changes
	// nothing.
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

	// Release frees owner's in-flight record so that a retry may run the
	// request again: the next Claim wins, with a higher fencing number (a
	// store may delete the record or keep it, lease ended and token gone).
	// If owner no longer holds the key, Release returns ErrNotOwner and
	// changes nothing.
	Release(ctx context.Context, key string, owner Lease) error
}

// State is where a record is in its life.
type State int

const (
	// StateInFlight means a request holds the key under a lease.
	StateInFlight State = iota + 1
	// StateCompleted means the request finished and its response is stored
	// for replay.
	StateCompleted
	// StateUnreplayable means the request finished but its response could
	// not be stored: too large, flushed, hijacked, cut short, with trailers
	// the handler added, or over a memory store's byte cap.
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

// Lease identifies the owner of an in-flight record: the random token the
// owner chose and the fencing number the store gave it. Fencing numbers of
// one key only grow while its record lives, so a downstream system can
// refuse writes from an owner whose lease was taken over.
type Lease struct {
	// Token is the owner's random token, compared on every renew,
	// complete and release. An empty token holds nothing.
	Token string
	// Fence is the fencing number the store gave this claim.
	Fence int64
}

// Record is what a store keeps for one key.
type Record struct {
	// State is in flight, completed or unreplayable.
	State State
	// Fingerprint is the hash of the request that claimed the key.
	Fingerprint string
	// Owner is the lease; its Token is set only on the record returned by a
	// successful Claim.
	Owner Lease
	// Response is the stored response; set only when State is
	// StateCompleted.
	Response *Response
	// TTL is the time left on the store's clock: of the lease while in
	// flight, of the retention once done.
	TTL time.Duration
}

// Response is a response stored for replay. Body is arbitrary bytes and
// must round-trip unchanged.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the headers to replay: the middleware stores only those
	// on its allow-list. A name without values carries nothing to replay,
	// and a store may drop it (every store here does).
	Header http.Header
	// Body is the whole response body.
	Body []byte
}

// ErrNotOwner is returned by Renew, Complete and Release when the caller's
// lease is no longer the one holding the key: it expired and was taken
// over, the record is gone, or it is done (a Renew or Release after the
// owner's Complete).
var ErrNotOwner = errors.New("store: lease not held by this owner")

// ErrEmptyToken is returned by Claim, and by a TxStore's BeginClaim, when
// the caller's token is empty: it could not tell one owner from another,
// so an empty token holds nothing.
var ErrEmptyToken = errors.New("store: empty owner token")

// ErrFull is returned by Claim when a bounded store has no room for another
// record even after removing expired ones.
var ErrFull = errors.New("store: full")
