package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed43327c4c/idempotency/store"
)

// TxStore is the transactional mode of the store: a store.TxStore whose
// claim is a database transaction that the handler's own writes join (see
// Tx), so that those writes and the stored response commit together or not
// at all. Give it to the middleware with idempotency.WithStore. While a
// request's transaction is open, other requests for its key, through a
// TxStore or a plain Store on the same table in any process, find it in
// flight at once, without waiting; a crash or a lost connection aborts the
// transaction and frees the key with nothing of the request left behind.
// Each request holds one pool connection from BeginClaim to Commit or
// Rollback, and keeps no lease. The embedded Store serves every plain
// method on the same table.
type TxStore struct {
	*Store
}

var _ store.TxStore = (*TxStore)(nil)

// NewTx returns a store in transactional mode on the table New would use
// with the same options. Like New it never dials, and a nil pool or an
// invalid option panics.
func NewTx(pool *pgxpool.Pool, opts ...Option) *TxStore {
	return &TxStore{Store: New(pool, opts...)}
}

// BeginClaim implements store.TxStore. If the key is free, or its record
// has expired, it is claimed: ctx is returned carrying the transaction (see
// Tx), with the in-flight record (fence 1, or the expired owner's fence plus
// one) and the store.Tx the caller must end. If another request's
// transaction holds the key, rec is in flight with TTL 0 and the caller's
// fingerprint, as the holder's row cannot be read before it commits.
// Otherwise rec is the committed record holding the key. The transaction
// has the pool's default isolation level.
func (s *TxStore) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, store.Record, store.Tx, error) {
	if token == "" {
		return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w", store.ErrEmptyToken)
	}
	if err := s.requireCurrent(ctx); err != nil {
		return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w", err)
	}
	for range staleAttempts {
		var tx pgx.Tx
		err := s.retry(ctx, func() (err error) {
			tx, err = s.pool.Begin(ctx)
			return err
		})
		if err != nil {
			return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w", err)
		}
		rec, claimed, err := s.claimOnce(ctx, tx, key, fingerprint, token, 0, true)
		if claimed {
			c := &claimTx{s: s.Store, tx: tx, key: key, owner: rec.Owner}
			return context.WithValue(ctx, txKey{}, handlerTx{Tx: tx}), rec, c, nil
		}
		// The transaction changed nothing; if ending it fails, pgx closes
		// its connection, and the server aborts it.
		_ = tx.Rollback(ctx)
		switch {
		case errors.Is(err, errStaleSnapshot):
			continue // a fresh transaction has a fresh snapshot at any isolation level
		case err != nil:
			return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w", err)
		}
		return ctx, rec, nil, nil
	}
	return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w %d times in a row", errStaleSnapshot, staleAttempts)
}

// claimTx is a claim held by an open transaction.
type claimTx struct {
	s     *Store
	tx    pgx.Tx
	key   string
	owner store.Lease
}

// Commit implements store.Tx: the UPDATE that stores the response (or
// marks the key done but not replayable when resp is nil) for retention,
// counted from the database's statement_timestamp(), then COMMIT, which
// wakes the key's watchers (see Store.Watch; a rollback wakes none). If the
// UPDATE fails, for instance because a statement of the handler failed and
// aborted the transaction, the transaction is rolled back and the error
// returned.
func (c *claimTx) Commit(ctx context.Context, resp *store.Response, retention time.Duration) error {
	state, status, header, body := completion(resp)
	tag, err := c.tx.Exec(ctx, c.s.sql.complete, rowKey(c.key), []byte(c.owner.Token), c.owner.Fence,
		int16(state), status, header, body, retention.Microseconds())
	if err == nil && tag.RowsAffected() == 0 {
		// Only the handler, through the transaction, can have changed the
		// claimed row.
		err = store.ErrNotOwner
	}
	if err != nil {
		_ = c.tx.Rollback(ctx)
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	if err := c.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	return nil
}

// Rollback implements store.Tx: ROLLBACK, or nothing after Commit. If the
// connection is lost instead, the server has already aborted the
// transaction, and the error is returned for the log.
func (c *claimTx) Rollback(ctx context.Context) error {
	err := c.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback: %w", err)
	}
	return nil
}

// txKey is the context key under which BeginClaim puts the transaction.
type txKey struct{}

// Tx returns the transaction of the protected request whose context is
// ctx, for the handler's writes: they commit with the stored response, or
// are rolled back with the claim. ok is false when the request holds no
// such transaction: its route is not protected, it has no key, or the
// middleware's store is not a TxStore.
//
// The middleware ends the transaction: Commit and Rollback on the returned
// pgx.Tx do nothing and return ErrTxOwned. To undo its writes, the handler
// answers with a status that is not recorded (5xx, 408, 409, 425 or 429)
// or panics; to undo only part of them and still answer, for instance,
// 422, it puts that part in a savepoint (the pgx.Tx's Begin) and rolls the
// savepoint back. A statement that fails outside a savepoint aborts the
// transaction, so that nothing can be committed: the client then gets 503
// and may retry. Like any pgx.Tx, it must not be used by two goroutines at
// once, nor after the handler returns.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(handlerTx)
	if !ok {
		return nil, false
	}
	return tx, true
}

// ErrTxOwned is returned by Commit and Rollback on the transaction Tx
// returns, which the middleware ends.
var ErrTxOwned = errors.New("pgstore: the idempotency middleware commits or rolls back this transaction")

// handlerTx is the claim's transaction as the handler sees it: everything
// but ending it.
type handlerTx struct {
	pgx.Tx
}

// Commit returns ErrTxOwned and does nothing.
func (handlerTx) Commit(context.Context) error { return ErrTxOwned }

// Rollback returns ErrTxOwned and does nothing.
func (handlerTx) Rollback(context.Context) error { return ErrTxOwned }
