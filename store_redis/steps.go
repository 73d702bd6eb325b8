package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.StepStore = (*Store)(nil)

// SaveStep implements store.StepStore in one script run, which appends the
// step to the record's key, with a WAIT after it when writes wait for
// replicas, as a claim's does. The steps live as long as the record in
// flight does: the lease plus the abandoned retention, from the latest
// claim or renewal.
func (s *Store) SaveStep(ctx context.Context, key string, owner store.Lease, step store.Step) error {
	if err := store.CheckStep(0, step); err != nil {
		return err
	}
	failed := 0
	if step.Failed {
		failed = 1
	}
	r, err := s.replication(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: save step: %w", err)
	}
	cmd, acks := s.eval(ctx, r, stepScript, s.keys(key), owner.Token, owner.Fence, step.Name, step.Result, failed, store.MaxSteps)
	saved, err := cmd.Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return store.ErrNotOwner
	case err != nil:
		return fmt.Errorf("redisstore: save step: %w", err)
	case saved == 0:
		return store.CheckStep(store.MaxSteps, step)
	}
	return r.acked("save step", acks)
}

// errBadSteps is what decodeSteps reports for a tail of another shape.
var errBadSteps = errors.New("the record holds malformed steps")

// decodeSteps reads the steps an in-flight record's tail holds, each
// "#name,#result,failed;" and then its name and result, as
// record_step.lua appends them; "" holds none.
func decodeSteps(tail string) ([]store.Step, error) {
	var steps []store.Step
	for tail != "" {
		head, rest, ok := strings.Cut(tail, ";")
		name, head, ok1 := strings.Cut(head, ",")
		result, failed, ok2 := strings.Cut(head, ",")
		nName, ok3 := decimal(name)
		nResult, ok4 := decimal(result)
		if !ok || !ok1 || !ok2 || !ok3 || !ok4 || failed != "0" && failed != "1" || nName+nResult > int64(len(rest)) {
			return nil, errBadSteps
		}
		steps = append(steps, store.Step{Name: rest[:nName], Result: []byte(rest[nName : nName+nResult]), Failed: failed == "1"})
		tail = rest[nName+nResult:]
	}
	return steps, nil
}
