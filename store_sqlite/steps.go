package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

var _ store.StepStore = (*Store)(nil)

// stepsOfSQL reads the steps of key ?1 while it is in flight under token
// ?2 and fence ?3; saveStepSQL sets them to ?4.
const (
	stepsOfSQL  = `SELECT steps FROM idempotency_keys WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`
	saveStepSQL = `UPDATE idempotency_keys SET steps = ?4 WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`
)

// errStepKnown is appendStep's refusal of a step whose name is recorded.
var errStepKnown = errors.New("step recorded already")

// SaveStep implements store.StepStore in one transaction on the write lock
// (a read of the row's steps, then their update), an owner's write that
// goes ahead of claims as Complete does. Like Renew, it takes the row of a
// lapsed lease neither taken over nor swept as still the owner's.
func (s *Store) SaveStep(ctx context.Context, key string, owner store.Lease, step store.Step) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	if err := store.CheckStep(0, step); err != nil {
		return fmt.Errorf("sqlitestore: save step: %w", err)
	}
	args := ownerArgs(key, owner, nil)
	var refusal error
	err := s.write(ctx, "save step", ending, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return err // nothing begun; tried again while the file is locked
		}
		var err error
		refusal, err = appendStep(ctx, conn, args, step)
		if err == nil && refusal == nil {
			_, err = conn.ExecContext(ctx, "COMMIT")
		}
		if err != nil || refusal != nil {
			rollback(ctx, conn)
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case refusal == nil, errors.Is(refusal, errStepKnown):
		return nil
	case errors.Is(refusal, store.ErrNotOwner):
		return store.ErrNotOwner
	}
	return fmt.Errorf("sqlitestore: save step: %w", refusal)
}

// appendStep appends step to the steps of the row args name, on conn in
// its transaction, or returns why it does not: ErrNotOwner, errStepKnown,
// or CheckStep's error.
func appendStep(ctx context.Context, conn *sql.Conn, args []any, step store.Step) (refusal, err error) {
	var encoded []byte
	err = conn.QueryRowContext(ctx, stepsOfSQL, args...).Scan(&encoded)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotOwner, nil
	case err != nil:
		return nil, err
	}
	steps, err := stepcodec.Decode(encoded)
	if err != nil {
		return nil, err
	}
	for _, recorded := range steps {
		if recorded.Name == step.Name {
			return errStepKnown, nil
		}
	}
	if refusal := store.CheckStep(len(steps), step); refusal != nil {
		return refusal, nil
	}
	_, err = conn.ExecContext(ctx, saveStepSQL, append(args, stepcodec.Append(encoded, step))...)
	return nil, err
}
