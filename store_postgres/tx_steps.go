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
// lease set from now. A step is a savepoint in the run's transaction, and
// its Commit commits that transaction: the step's writes, its recovery
// point and the run's writes outside steps since the step before. A run
// holds one pool connection at a time, so that runs waiting for a
// connection never hold the ones they wait for.
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
	point, err := c.slot.tx.Begin(ctx)
	if err != nil {
		return ctx, nil, fmt.Errorf("pgstore: begin step: %w", err)
	}
	step := &stepTx{c: c, tx: point}
	return context.WithValue(ctx, txKey{}, &txSlot{tx: point}), step, nil
}

// commitClaim renews c's claim for lease, commits it, and begins the run's
// next transaction.
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
	if err := c.beginNext(ctx); err != nil {
		_ = c.s.Release(ctx, c.key, c.owner)
		return err
	}
	return nil
}

// beginNext begins the run's transaction after the one just committed. If
// it fails, the committed one stays in the slot, where any use fails.
func (c *claimTx) beginNext(ctx context.Context) error {
	var next pgx.Tx
	err := c.s.retry(ctx, func() (err error) {
		next, err = c.s.pool.Begin(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("beginning the run's next transaction: %w", err)
	}
	c.slot.tx = next
	return nil
}

// stepTx is a step's savepoint in its run's transaction.
type stepTx struct {
	c  *claimTx
	tx pgx.Tx
}

// Commit implements store.StepTx: saveStepSQL in the step's savepoint,
// then the commit of the run's transaction, and the next one begun.
// Nothing is sent again: a lost connection ends the transaction, and the
// step runs again on the next run. A bound's error or ErrNotOwner undoes
// the step alone: the run's transaction goes on.
func (t *stepTx) Commit(ctx context.Context, step store.Step) error {
	c := t.c
	err := c.s.saveStep(ctx, t.tx, c.key, c.owner, step, func(op func() error) error { return op() })
	if err != nil {
		_ = t.tx.Rollback(ctx)
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit step: %w", err)
	}
	if err := c.slot.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit step: %w", err)
	}
	if err := c.beginNext(ctx); err != nil {
		return fmt.Errorf("pgstore: step committed, then %w", err)
	}
	return nil
}

// Rollback implements store.StepTx: back to the step's savepoint.
func (t *stepTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback step: %w", err)
	}
	return nil
}
