package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

var _ store.StepStore = (*Store)(nil)

// The steps of a row: steps holds their bytes (store/stepcodec),
// step_names the hex of each name followed by a comma, and step_count
// their number, so that one UPDATE can refuse a name recorded already or a
// step past the bound. Its args are the step's bytes and its name's hex,
// then `key`, token and fence, then the bound and the name's hex again.
const (
	knownStepSQL = "LOCATE(CONCAT(',', ?, ','), CONCAT(',', COALESCE(step_names, ''))) > 0"

	saveStepSQL = "UPDATE `idempotency_keys` SET steps = CONCAT(COALESCE(steps, ''), ?)," +
		" step_names = CONCAT(COALESCE(step_names, ''), ?, ','), step_count = step_count + 1" +
		ownerWhereSQL + " AND held = 0 AND step_count < ? AND NOT " + knownStepSQL

	// stepStateSQL tells why saveStepSQL changed no row: the name's hex,
	// then `key`, token and fence; no row means the owner lost the key.
	stepStateSQL = "SELECT step_count, " + knownStepSQL + " FROM `idempotency_keys`" + ownerWhereSQL + " AND held = 0"
)

// SaveStep implements store.StepStore in one UPDATE, one round trip; a
// step it refuses costs a read more, to say why. Like Renew, it takes the
// row of a lapsed lease neither taken over nor swept as still the owner's.
// A claim of a transactional TxStore, whose lease is its connection's
// lock, keeps no steps: SaveStep returns store.ErrNotOwner for it.
func (s *Store) SaveStep(ctx context.Context, key string, owner store.Lease, step store.Step) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	if err := store.CheckStep(0, step); err != nil {
		return fmt.Errorf("mysqlstore: save step: %w", err)
	}
	row, token := rowKey(key), []byte(owner.Token)
	name := []byte(hex.EncodeToString([]byte(step.Name)))
	res, err := s.sql.saveStep.exec(ctx, stepcodec.Append(nil, step), name, row, token, owner.Fence, store.MaxSteps, name)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && n == 0 {
		err = s.refusedStep(ctx, row, token, owner.Fence, name, step)
	}
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		return fmt.Errorf("mysqlstore: save step: %w", explain(err))
	}
	return err
}

// refusedStep returns why saveStepSQL changed no row: nil for a name
// recorded already (a SaveStep sent again), CheckStep's error past the
// bound, else store.ErrNotOwner.
func (s *Store) refusedStep(ctx context.Context, row, token []byte, fence int64, name []byte, step store.Step) error {
	var (
		count int
		known bool
	)
	r, err := s.sql.stepState.queryRow(ctx, name, row, token, fence)
	if err == nil {
		err = r.Scan(&count, &known)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotOwner
	case err != nil:
		return err
	case known:
		return nil
	}
	if err := store.CheckStep(count, step); err != nil {
		return err
	}
	return store.ErrNotOwner // only another owner can have changed the row meanwhile
}
