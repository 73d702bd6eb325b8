// Package stepcodec turns a request's recorded steps into the bytes of one
// column, for stores that keep them in a row, and back. Each step is its
// name's length as a uvarint, the name, a flag byte (1 for a step whose
// error was made final, else 0), its result's length as a uvarint and the
// result; a row's steps are their encodings one after the other, so a
// step is recorded by appending its bytes.
package stepcodec

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

// ErrCorrupt means the bytes given to Decode are not what Append writes.
var ErrCorrupt = errors.New("stored steps are corrupt")

// Step flags: the byte after a step's name.
const (
	done   = 0
	failed = 1
)

// Append appends step's bytes to steps and returns the result.
func Append(steps []byte, step store.Step) []byte {
	out := make([]byte, 0, len(steps)+2*binary.MaxVarintLen64+len(step.Name)+1+len(step.Result))
	out = binary.AppendUvarint(append(out, steps...), uint64(len(step.Name)))
	flag := byte(done)
	if step.Failed {
		flag = failed
	}
	out = append(append(out, step.Name...), flag)
	out = binary.AppendUvarint(out, uint64(len(step.Result)))
	return append(out, step.Result...)
}

// Decode returns the steps whose bytes Append wrote into b, in order; their
// results share b's memory.
func Decode(b []byte) ([]store.Step, error) {
	var steps []store.Step
	for len(b) > 0 {
		name, rest, ok := cutField(b)
		if !ok || len(rest) == 0 || rest[0] > failed {
			return nil, fmt.Errorf("%w: step %d", ErrCorrupt, len(steps))
		}
		isFailed := rest[0] == failed
		result, rest, ok := cutField(rest[1:])
		if !ok {
			return nil, fmt.Errorf("%w: step %d", ErrCorrupt, len(steps))
		}
		steps = append(steps, store.Step{Name: string(name), Result: result, Failed: isFailed})
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
