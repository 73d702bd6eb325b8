package store

import (
	"context"
	"errors"
	"fmt"
)

// StepStore is a Store that also keeps a request's steps: the results of
// the parts of its run that finished, its recovery points. A later run of
// the request (a retry after its owner died or released the key, a
// takeover) gets them back from Claim in Record.Steps, so it resumes
// instead of redoing them.
type StepStore interface {
	Store

	// SaveStep records step after the steps already recorded for owner's
	// in-flight record on key, or returns ErrNotOwner, changing nothing, if
	// owner's lease no longer holds key. A step whose name is recorded
	// already changes nothing (a reply may have been lost). Past MaxSteps
	// steps or MaxStepBytes of Result, it returns an error wrapping
	// ErrStepLimit. step is only lent: the store copies what it keeps.
	//
	// Steps outlive a released or lapsed lease, so the next owner gets
	// them, for as long as the store keeps the key's fence (see each
	// store); Complete drops them, since the response now stands for them.
	SaveStep(ctx context.Context, key string, owner Lease, step Step) error
}

// Step is one recorded step of a request.
type Step struct {
	Name string
	// Result is the step's result as the caller encoded it, or, if Failed,
	// the message of the error it ended with.
	Result []byte
	// Failed marks a step that ended with an error its caller made final:
	// a later run gets the error back instead of running the step.
	Failed bool
}

// The bounds every StepStore keeps to: steps per key, and bytes of a
// step's Result.
const (
	MaxSteps     = 32
	MaxStepBytes = 64 << 10
)

// ErrStepLimit is wrapped by SaveStep's error for a step past MaxSteps or
// MaxStepBytes; nothing is recorded.
var ErrStepLimit = errors.New("store: step over the bounds")

// CheckStep returns an error wrapping ErrStepLimit if step cannot join
// recorded steps under the bounds.
func CheckStep(recorded int, step Step) error {
	switch {
	case len(step.Result) > MaxStepBytes:
		return fmt.Errorf("%w: step %q: %d bytes of result, at most %d", ErrStepLimit, step.Name, len(step.Result), MaxStepBytes)
	case recorded >= MaxSteps:
		return fmt.Errorf("%w: step %q: %d steps recorded already, at most %d", ErrStepLimit, step.Name, recorded, MaxSteps)
	}
	return nil
}
