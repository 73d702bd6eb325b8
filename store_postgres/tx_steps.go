package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.TxStepStore = (*TxStore)(nil)

// BeginStep implements store.TxStepStore. The first step of a run commits
// the claim's transaction (the handler's writes so far with it) with the
// lease set from now, and begins the transaction Tx returns outside steps
// from then on; each step then holds a second pool connection until it
// ends.
func (s *TxStore) BeginStep(ctx context.Context, tx store.Tx, owner store.Lease, lease time.Duration) (context.Context, store.StepTx, error) {
	c, ok := tx.(*claimTx)
	if !ok {
		return ctx, nil, errors.New("pgstore: begin step: not a transaction of this store's BeginClaim")
	}
	if !c.durable {
		if err := c.commitClaim(ctx, lease); err != nil {
			return ctx, nil, fmt.Errorf("pgstore: begin step: %w", err)
		}
	}
	var stx pgx.Tx
	err := s.retry(ctx, func() (err error) {
		stx, err = s.pool.Begin(ctx)
		return err
	})
	if err != nil {
		return ctx, nil, fmt.Errorf("pgstore: begin step: %w", err)
	}
	step := &stepTx{s: s.Store, tx: stx, key: c.key, owner: owner}
	return context.WithValue(ctx, txKey{}, &txSlot{tx: stx}), step, nil
}

// commitClaim renews c's claim for lease, commits it, and opens the
// transaction of the run's later writes outside steps.
func (c *claimTx) commitClaim(ctx context.Context, lease time.Duration) error {
	tag, err := c.slot.tx.Exec(ctx, c.s.sql.renew, rowKey(c.key), []byte(c.owner.Token), c.owner.Fence, lease.Microseconds())
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotOwner // only the handler can have changed the row
	}
	if err == nil {
		err = c.slot.tx.Commit(ctx)
	} else {
		_ = c.slot.tx.Rollback(ctx)
	}
	if err != nil {
		return fmt.Errorf("committing the claim: %w", err)
	}
	c.durable = true
	var next pgx.Tx
	err = c.s.retry(ctx, func() (err error) {
		next, err = c.s.pool.Begin(ctx)
		return err
	})
	if err != nil {
		_ = c.s.Release(ctx, c.key, c.owner)
		return fmt.Errorf("beginning the run's next transaction: %w", err)
	}
	c.slot.tx = next
	return nil
}

// stepTx is a step's transaction.
type stepTx struct {
	s     *Store
	tx    pgx.Tx
	key   string
	owner store.Lease
}

// Commit implements store.StepTx: saveStepSQL in the step's transaction,
// then its commit. Nothing is sent again: a lost connection ends the
// transaction, and the step runs again on the next run.
func (t *stepTx) Commit(ctx context.Context, step store.Step) error {
	err := t.s.saveStep(ctx, t.tx, t.key, t.owner, step, func(op func() error) error { return op() })
	if err != nil {
		_ = t.tx.Rollback(ctx)
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit step: %w", err)
	}
	return nil
}

// Rollback implements store.StepTx.
func (t *stepTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback step: %w", err)
	}
	return nil
}
