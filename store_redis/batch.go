package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// batchLanes is how many pipelines of claims, and of completions, a store
// has in flight at a time; a call that finds them all busy goes out in the
// next one, with every call that waited meanwhile (see store/batch).
const batchLanes = 2

// completeCall is a Complete going out in a batch.
type completeCall struct {
	keys []string
	args []any
	err  error
}

// Settle implements batch.Item.
func (call *completeCall) Settle(err error) { call.err = err }

// sendCompletes runs the complete script for calls, all in one pipeline.
// A pipeline cannot load a script the server lost (a restart, SCRIPT
// FLUSH), so it returns the calls that met that, or any error but the
// script's refusal, for their callers to send again alone through
// Script.Run.
func (s *Store) sendCompletes(ctx context.Context, calls []*completeCall) (again []*completeCall) {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, call := range calls {
			cmds[i] = completeScript.EvalSha(ctx, p, call.keys, call.args...)
		}
		return nil
	})
	for i, call := range calls {
		call.err = cmds[i].Err()
		if call.err != nil && !errors.Is(call.err, redis.Nil) {
			again = append(again, call)
		}
	}
	return again
}

// completeAlone runs the complete script for call by itself.
func (s *Store) completeAlone(ctx context.Context, call *completeCall) {
	call.err = completeScript.Run(ctx, s.client, call.keys, call.args...).Err()
}
