package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// batchLanes is how many pipelines of claims, and of completions, a store
// has in flight at a time; a call that finds them all busy goes out in the
// next one, with every call that waited meanwhile (see internal/batch).
const batchLanes = 2

// completeCall is a Complete going out in a batch.
type completeCall struct {
	keys []string
	args []any
	err  error
}

// Settle implements batch.Item.
func (call *completeCall) Settle(err error) { call.err = err }

// sendCompletes runs the complete script for calls, all in one pipeline;
// a server that lost the script (a restart, SCRIPT FLUSH) gets it again
// from each call alone.
func (s *Store) sendCompletes(ctx context.Context, calls []*completeCall) {
	if len(calls) == 1 {
		calls[0].err = completeScript.Run(ctx, s.client, calls[0].keys, calls[0].args...).Err()
		return
	}
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, call := range calls {
			cmds[i] = completeScript.EvalSha(ctx, p, call.keys, call.args...)
		}
		return nil
	})
	for i, call := range calls {
		call.err = cmds[i].Err()
		if redis.HasErrorPrefix(call.err, "NOSCRIPT") {
			call.err = completeScript.Run(ctx, s.client, call.keys, call.args...).Err()
		}
	}
}
