package store

import (
	"context"
	"time"
)

// TxStore is a Store that can also claim a key inside a database
// transaction the handler's writes join, so that they and the stored
// response commit together or not at all. While the transaction is open,
// other requests find the key in flight without waiting; if it ends without
// Commit, the claim and the handler's writes are gone together.
type TxStore interface {
	Store

	// BeginClaim opens a transaction and claims key in it under the
	// caller's token (an empty one is refused with ErrEmptyToken). When the
	// key is claimed, tx is non-nil, rec is the in-flight record, and txCtx
	// carries the transaction for the backend's accessor (such as pgstore.Tx);
	// the caller ends tx with exactly one Commit or Rollback. Otherwise tx is
	// nil, no transaction is left open, and rec is the record holding the
	// key, as Claim returns it (TTL 0 when the holder is an open transaction).
	BeginClaim(ctx context.Context, key, fingerprint, token string) (txCtx context.Context, rec Record, tx Tx, err error)
}

// Tx is a claim held by an open transaction.
type Tx interface {
	// Commit writes the completed record (resp nil for done but not
	// replayable) and commits the transaction. An error means nothing was
	// committed, unless the connection was lost during the commit itself.
	Commit(ctx context.Context, resp *Response, retention time.Duration) error

	// Rollback undoes the claim and the handler's writes. After a failed
	// Commit it is a no-op.
	Rollback(ctx context.Context) error
}
