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
			c := &claimTx{s: s.Store, slot: &txSlot{tx: tx}, key: key, owner: rec.Owner}
			return context.WithValue(ctx, txKey{}, c.slot), rec, c, nil
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

// claimTx is a claim's transaction; once a step committed the claim
// (durable), slot holds the run's transaction since the last step, which
// the next step's Commit or Commit, with the response, ends.
type claimTx struct {
	s       *Store
	slot    *txSlot
	key     string
	owner   store.Lease
	durable bool
}

// Commit implements store.Tx: it stores the response and commits, which
// wakes the key's watchers. If storing fails (a handler's statement may
// have aborted the transaction), it rolls back and returns the error.
func (c *claimTx) Commit(ctx context.Context, resp *store.Response, retention time.Duration) error {
	tx := c.slot.tx
	state, status, header, body := completion(resp)
	tag, err := tx.Exec(ctx, c.s.sql.complete, rowKey(c.key), []byte(c.owner.Token), c.owner.Fence,
		int16(state), status, header, body, retention.Microseconds())
	if err == nil && tag.RowsAffected() == 0 {
		// Only the handler, through the transaction, can have changed the
		// claimed row.
		err = store.ErrNotOwner
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	return nil
}

// Rollback implements store.Tx. Once a step committed the claim, it
// undoes the writes since and releases the key, its steps kept for the
// next claim.
func (c *claimTx) Rollback(ctx context.Context) error {
	err := c.slot.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("pgstore: rollback: %w", err)
	}
	// A failed rollback closes its connection, which ends the transaction
	// as well: the key is released either way.
	if c.durable {
		err = errors.Join(err, c.s.Release(ctx, c.key, c.owner))
	}
	return err
}

type txKey struct{}

// Tx returns the transaction of the protected request whose context is
// ctx, for the handler's writes; ok is false when the request holds none.
// Inside a step (idempotency.Step) it is the step's savepoint; after a
// step, call Tx again, since the one from before is then committed. Writes
// outside steps commit with the next step's recovery point, or with the
// response after the last step.
// The middleware ends it: Commit and Rollback on it return ErrTxOwned. To
// undo its writes the handler answers with a status that is not recorded,
// or undoes part of them in a savepoint. It must not be used after the
// handler returns.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	slot, ok := ctx.Value(txKey{}).(*txSlot)
	if !ok {
		return nil, false
	}
	return handlerTx{Tx: slot.tx}, true
}

// txSlot holds the transaction Tx returns for a context: a step's, or the
// run's outside steps, which a run's first step replaces (see BeginStep).
// Only the handler's goroutine, running the step, changes it.
type txSlot struct {
	tx pgx.Tx
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
