package store

import (
	"context"
	"time"
)

// TxStore is a Store that can also claim a key inside a database transaction
// the handler's writes join, so they commit with the stored response or not
// at all. While it is open, other requests find the key in flight without
// waiting.
type TxStore interface {
	Store

	// BeginClaim opens a transaction and claims key in it under token. If
	// claimed, tx is non-nil, rec is the in-flight record, txCtx carries the
	// transaction for the backend's accessor (such as pgstore.Tx), and the
	// caller ends tx with exactly one Commit or Rollback. Otherwise tx is nil,
	// no transaction stays open, and rec is the holder's record as Claim
	// returns it (TTL 0 when the holder is an open transaction).
	BeginClaim(ctx context.Context, key, fingerprint, token string) (txCtx context.Context, rec Record, tx Tx, err error)
}

// Tx is a claim held by an open transaction.
type Tx interface {
	// Commit stores the completed record (nil resp: not replayable) and
	// commits. An error means nothing was committed, unless the connection
	// was lost during the commit itself.
	Commit(ctx context.Context, resp *Response, retention time.Duration) error

	// Rollback undoes the claim and the handler's writes; after a failed
	// Commit it is a no-op.
	Rollback(ctx context.Context) error
}
