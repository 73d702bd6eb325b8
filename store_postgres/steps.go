package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.StepStore = (*Store)(nil)

// saveStepSQL appends step $7 (encodeStep) to key $1's steps while it is
// in flight under token $2 and fence $3, unless a step starts with the
// same $5 bytes $4 (its name) or $6 steps are recorded, and returns how
// many steps the row has and whether one by that name is among them.
//
// The check and the append are one UPDATE, so steps saved at once re-check
// against each other's committed rows rather than a stale snapshot; a step
// left out still rewrites the row, which only a resend or a step past the
// bound costs. No indexed column changes: the update stays HOT.
const saveStepSQL = `
UPDATE idempotency_keys AS t
SET steps = CASE WHEN coalesce(cardinality(t.steps), 0) < $6
                      AND NOT EXISTS (SELECT FROM unnest(t.steps) AS s(step) WHERE substr(s.step, 1, $5) = $4::bytea)
                 THEN array_append(t.steps, $7::bytea) ELSE t.steps END
WHERE t.key = $1 AND t.token = $2 AND t.fence = $3 AND t.state = 1
RETURNING coalesce(cardinality(t.steps), 0),
          EXISTS (SELECT FROM unnest(t.steps) AS s(step) WHERE substr(s.step, 1, $5) = $4::bytea)`

// SaveStep implements store.StepStore in one UPDATE, one round trip. The
// size bound is checked before sending, the count in the statement. Like
// Renew, it takes the row of a lapsed lease neither taken over nor swept
// as still the owner's.
func (s *Store) SaveStep(ctx context.Context, key string, owner store.Lease, step store.Step) error {
	return s.saveStep(ctx, s.db, key, owner, step, func(op func() error) error { return s.retry(ctx, op) })
}

// saveStep is SaveStep on db, its statement sent by send.
func (s *Store) saveStep(ctx context.Context, db querier, key string, owner store.Lease, step store.Step, send func(op func() error) error) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	if err := store.CheckStep(0, step); err != nil {
		return fmt.Errorf("pgstore: save step: %w", err)
	}
	name, encoded := encodeStep(step)
	var (
		recorded int
		kept     bool
	)
	err := send(func() error {
		return db.QueryRow(ctx, s.sql.saveStep, rowKey(key), []byte(owner.Token), owner.Fence,
			name, len(name), store.MaxSteps, encoded).Scan(&recorded, &kept)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotOwner
	case err != nil:
		return fmt.Errorf("pgstore: save step: %w", err)
	case !kept:
		return fmt.Errorf("pgstore: save step: %w", store.CheckStep(recorded, step))
	}
	return nil
}

// Step flags: the byte between a step's name and its result.
const (
	stepDone   = 0
	stepFailed = 1
)

// encodeStep returns step as an element of the steps column: its name's
// length as a uvarint, the name, a flag byte and the result. name is the
// element's first bytes, which no other name's element starts with.
func encodeStep(step store.Step) (name, encoded []byte) {
	encoded = binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(step.Name)+1+len(step.Result)), uint64(len(step.Name)))
	encoded = append(encoded, step.Name...)
	name = encoded
	flag := byte(stepDone)
	if step.Failed {
		flag = stepFailed
	}
	encoded = append(append(encoded, flag), step.Result...)
	return name, encoded
}

// decodeSteps reverses encodeStep for each element of the steps column.
func decodeSteps(elements [][]byte) ([]store.Step, error) {
	if len(elements) == 0 {
		return nil, nil
	}
	steps := make([]store.Step, len(elements))
	for i, e := range elements {
		n, size := binary.Uvarint(e)
		if size <= 0 || uint64(len(e)-size) <= n {
			return nil, fmt.Errorf("step %d of the row is not one pgstore encoded", i)
		}
		flag := e[size+int(n)]
		if flag != stepDone && flag != stepFailed {
			return nil, fmt.Errorf("step %d of the row has an unknown flag %d", i, flag)
		}
		steps[i] = store.Step{Name: string(e[size : size+int(n)]), Result: e[size+int(n)+1:], Failed: flag == stepFailed}
	}
	return steps, nil
}
