package store

import (
	"context"
	"errors"
	"fmt"
)

// Admin is a Store an operator can look into and correct, one record at a
// time. Records are addressed by HashKey of their key, the name shared stores
// file them under, so a tool needs neither the raw key nor the scope.
type Admin interface {
	Store

	// Inspect returns the record filed under hash without changing it; found
	// is false when there is none or it expired. Owner's Token is never set;
	// its Fence is the record's latest. A StepStore's record in flight has
	// its recorded Steps.
	Inspect(ctx context.Context, hash string) (rec Record, found bool, err error)

	// Delete removes the record filed under hash and reports whether there
	// was one. A record in flight under a live lease is refused with
	// ErrLeaseLive, changing nothing, unless force is set.
	Delete(ctx context.Context, hash string, force bool) (deleted bool, err error)

	// Find returns the hashes, in no order, of at most limit live records
	// whose hash begins with prefix (lower-case hex).
	Find(ctx context.Context, prefix string, limit int) ([]string, error)
}

// ErrLeaseLive is returned by Admin.Delete for a record still held by a
// live lease when the delete is not forced.
var ErrLeaseLive = errors.New("store: record in flight under a live lease")

// ErrBadHash is returned by an Admin's methods for a hash that is not
// HashKey's 64 lower-case hex digits, or a prefix that does not begin one.
var ErrBadHash = errors.New("store: not a lower-case hex SHA-256")

// CheckHash returns nil if hash is 64 lower-case hex digits or, with
// prefix set, a beginning of such; else ErrBadHash, wrapped with hash.
func CheckHash(hash string, prefix bool) error {
	ok := len(hash) == 64 || prefix && len(hash) < 64
	for i := 0; ok && i < len(hash); i++ {
		c := hash[i]
		ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrBadHash, hash)
	}
	return nil
}

// Pinger is a Store that answers a cheap health call, for readiness probes.
type Pinger interface {
	Store

	// Ping returns nil once the store has answered; it reads and writes no
	// record.
	Ping(ctx context.Context) error
}
