package store

import (
	"context"
	"time"
)

// TxStepStore is a TxStore whose steps are atomic phases: each step's
// writes through the backend's transaction accessor commit in one
// transaction with the step's recovery point, or neither does. The first
// step of a run commits the claim's transaction so far, leaving the key in
// flight under its owner's lease, which the caller must then renew.
type TxStepStore interface {
	TxStore
	StepStore

	// BeginStep opens the transaction of a step of the run that tx, a Tx
	// of this store's BeginClaim, holds, for owner; stepCtx carries it for
	// the accessor. If tx's claim is not yet committed, BeginStep first
	// commits it, the key in flight for lease from now. The step's Commit
	// commits the run's writes outside steps since the step before with
	// its own. The caller ends step with exactly one Commit or Rollback,
	// before it calls BeginStep again.
	BeginStep(ctx context.Context, tx Tx, owner Lease, lease time.Duration) (stepCtx context.Context, step StepTx, err error)
}

// StepTx is a step's open transaction.
type StepTx interface {
	// Commit records step as SaveStep does and commits it with the step's
	// writes; ErrNotOwner or a bound's error means it rolled back and
	// nothing was recorded.
	Commit(ctx context.Context, step Step) error

	// Rollback undoes the step's writes; after a failed Commit it is a
	// no-op.
	Rollback(ctx context.Context) error
}
