package store

import (
	"context"
	"time"
)

// TxStore is a Store that can also claim a key inside a database
// transaction which the handler's own writes join, so that the handler's
// effects and the stored response commit together or not at all. The
// middleware uses it instead of Claim when its store implements it.
//
// While the transaction is open, the key is in flight for every other
// request: their Claim or BeginClaim reports it in flight without waiting
// for the transaction to end. If the transaction ends without Commit (a
// rollback, a crash, a lost connection), the claim and the handler's writes
// are gone together, and the next request claims the key afresh.
type TxStore interface {
	Store

	// BeginClaim opens a transaction and claims key in it for the request
	// whose fingerprint is given, under the caller's random token (an empty
	// one is refused with ErrEmptyToken, and no transaction is opened).
	//
	// When the key is claimed, tx is non-nil, rec is the in-flight record
	// with the caller's fingerprint and its owner's lease (fencing number at
	// least 1), and ctx carries the open transaction, for the backend's
	// accessor (such as pgstore.Tx) to hand to the handler; the caller must
	// end tx with exactly one Commit or Rollback. Otherwise tx is nil, no transaction is left open, and rec is
	// the record holding the key, as Claim returns it: in flight (TTL may
	// be zero when the holder is an open transaction) or done. A completed
	// record whose retention has ended, an in-flight record whose lease has
	// ended, and a missing record are all claimed.
	BeginClaim(ctx context.Context, key, fingerprint, token string) (txCtx context.Context, rec Record, tx Tx, err error)
}

// Tx is a claim held by an open transaction.
type Tx interface {
	// Commit writes the completed record (resp for replay, or nil for done
	// but not replayable, kept for retention) and commits the transaction
	// with the handler's writes. If it returns an error, nothing was
	// committed, unless the error is a lost connection during the commit
	// itself, which no client of a database can decide.
	Commit(ctx context.Context, resp *Response, retention time.Duration) error

	// Rollback abandons the transaction: the claim and the handler's writes
	// are undone, and the key is free for a retry. Rollback after a failed
	// Commit is a no-op.
	Rollback(ctx context.Context) error
}
