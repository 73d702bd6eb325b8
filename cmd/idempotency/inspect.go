package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"unicode/utf8"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// envSealKeys names the ring's file when -seal-keys is not given.
const envSealKeys = "IDEMPOTENCY_SEAL_KEYS"

// errUnopened wraps inspect's error for a sealed record it could not open:
// the rest of the record is still reported.
var errUnopened = errors.New("cannot open the sealed record")

// inspect reports the record filed under hash in out: its state (absent
// when there is none), fence and ttl_ms, the steps an in-flight record's
// run recorded (see stepsOut), and a completed record's status,
// header and body, as text when it is valid UTF-8, else in body_base64. A
// sealed record names its key in sealed_by and is opened with the ring in
// ringFile ("": none); one that cannot be is reported without header and
// body, and an error wrapping errUnopened.
func inspect(ctx context.Context, s store.Admin, hash string, found bool, ringFile string, out map[string]any) error {
	var rec store.Record
	if found {
		var err error
		if rec, found, err = s.Inspect(ctx, hash); err != nil {
			return err
		}
	}
	if !found {
		out["state"] = "absent"
		return nil
	}
	out["state"] = rec.State.String()
	out["fence"] = rec.Owner.Fence
	out["ttl_ms"] = rec.TTL.Milliseconds()
	if len(rec.Steps) > 0 {
		out["steps"] = stepsOut(rec.Steps)
	}
	resp := rec.Response
	if resp == nil {
		return nil
	}
	out["status"] = resp.Status
	if id, sealed := seal.KeyID(resp); sealed {
		out["sealed_by"] = id
		var err error
		if resp, err = open(ringFile, hash, id, resp); err != nil {
			return fmt.Errorf("%w: %w", errUnopened, err)
		}
	}
	out["header"] = resp.Header
	if utf8.Valid(resp.Body) {
		out["body"] = string(resp.Body)
	} else {
		out["body_base64"] = resp.Body // JSON writes bytes in base64
	}
	return nil
}

// stepsOut is how inspect reports steps, in the order recorded: each its
// name, its result as text when it is valid UTF-8 (the JSON a step
// returned), else in result_base64, and failed for an error made final.
func stepsOut(steps []store.Step) []map[string]any {
	out := make([]map[string]any, len(steps))
	for i, step := range steps {
		s := map[string]any{"name": step.Name}
		if utf8.Valid(step.Result) {
			s["result"] = string(step.Result)
		} else {
			s["result_base64"] = step.Result
		}
		if step.Failed {
			s["failed"] = true
		}
		out[i] = s
	}
	return out
}

// open opens resp, sealed under the key id, with the ring in ringFile.
func open(ringFile, hash, id string, resp *store.Response) (*store.Response, error) {
	if ringFile == "" {
		return nil, fmt.Errorf("it is sealed under key %q, and no ring was given: pass -seal-keys FILE or set %s", id, envSealKeys)
	}
	f, err := os.Open(ringFile)
	if err != nil {
		return nil, fmt.Errorf("the ring: %w", err)
	}
	defer f.Close()
	ring, err := seal.ParseRing(f)
	if err != nil {
		return nil, fmt.Errorf("the ring in %s: %w", ringFile, err)
	}
	opened, err := ring.Open(hash, resp)
	if errors.Is(err, seal.ErrKeyMissing) {
		return nil, fmt.Errorf("it is sealed under key %q, which the ring in %s does not hold", id, ringFile)
	}
	return opened, err
}
