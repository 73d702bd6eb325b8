package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
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
	steps, err := decodeSteps(encoded)
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
	_, err = conn.ExecContext(ctx, saveStepSQL, append(args, encodeStep(encoded, step))...)
	return nil, err
}

// Step flags: the byte after a step's name.
const (
	stepDone   = 0
	stepFailed = 1
)

// encodeStep appends step to steps, the steps column's bytes: its name's
// length as a uvarint, the name, a flag byte, the result's length as a
// uvarint and the result.
func encodeStep(steps []byte, step store.Step) []byte {
	out := make([]byte, 0, len(steps)+2*binary.MaxVarintLen64+len(step.Name)+1+len(step.Result))
	out = binary.AppendUvarint(append(out, steps...), uint64(len(step.Name)))
	flag := byte(stepDone)
	if step.Failed {
		flag = stepFailed
	}
	out = append(append(out, step.Name...), flag)
	out = binary.AppendUvarint(out, uint64(len(step.Result)))
	return append(out, step.Result...)
}

// decodeSteps reverses encodeStep over a whole steps column.
func decodeSteps(b []byte) ([]store.Step, error) {
	var steps []store.Step
	for len(b) > 0 {
		name, rest, ok := cutField(b)
		if !ok || len(rest) == 0 || rest[0] > stepFailed {
			return nil, fmt.Errorf("step %d of the row is not one sqlitestore encoded", len(steps))
		}
		failed := rest[0] == stepFailed
		result, rest, ok := cutField(rest[1:])
		if !ok {
			return nil, fmt.Errorf("step %d of the row is not one sqlitestore encoded", len(steps))
		}
		steps = append(steps, store.Step{Name: string(name), Result: result, Failed: failed})
		b = rest
	}
	return steps, nil
}

// cutField splits a uvarint length and that many bytes off b.
func cutField(b []byte) (field, rest []byte, ok bool) {
	n, size := binary.Uvarint(b)
	if size <= 0 || uint64(len(b)-size) < n {
		return nil, nil, false
	}
	return b[size : size+int(n)], b[size+int(n):], true
}
