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
// claim is a database transaction the handler's writes join (see Tx). Each
// request holds one pool connection from BeginClaim to Commit or Rollback,
// and keeps no lease. The embedded Store serves every plain method on the
// same table.
type TxStore struct {
	*Store
}

var _ store.TxStore = (*TxStore)(nil)

// NewTx returns a store in transactional mode on the table New would use
// with the same options.
func NewTx(pool *pgxpool.Pool, opts ...Option) *TxStore {
	return &TxStore{Store: New(pool, opts...)}
}

// BeginClaim implements store.TxStore; the returned context carries the
// transaction for Tx. The transaction has the pool's default isolation
// level.
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
		// its connection.
		_ = tx.Rollback(ctx)
		switch {
		case errors.Is(err, errStaleSnapshot):
			continue // a fresh transaction has a fresh snapshot
		case err != nil:
			return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w", err)
		}
		return ctx, rec, nil, nil
	}
	return ctx, store.Record{}, nil, fmt.Errorf("pgstore: begin claim: %w %d times in a row", errStaleSnapshot, staleAttempts)
}

type claimTx struct {
	s     *Store
	tx    pgx.Tx
	key   string
	owner store.Lease
}

// Commit implements store.Tx: it stores the response and commits, which
// wakes the key's watchers. If storing fails (a handler's statement may
// have aborted the transaction), it rolls back and returns the error.
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

// Rollback implements store.Tx.
func (c *claimTx) Rollback(ctx context.Context) error {
	err := c.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback: %w", err)
	}
	return nil
}

type txKey struct{}

// Tx returns the transaction of the protected request whose context is
// ctx, for the handler's writes; ok is false when the request holds none.
// The middleware ends it: Commit and Rollback on it return ErrTxOwned. To
// undo its writes the handler answers with a status that is not recorded,
// or undoes part of them in a savepoint. It must not be used after the
// handler returns.
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

// handlerTx is the claim's transaction without its ending.
type handlerTx struct {
	pgx.Tx
}

func (handlerTx) Commit(context.Context) error { return ErrTxOwned }

func (handlerTx) Rollback(context.Context) error { return ErrTxOwned }
