package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// MastersMayHaveMoved exports mastersMayHaveMoved to the tests.
var MastersMayHaveMoved = mastersMayHaveMoved

// LoadScripts loads the store's scripts on c, as their first call there
// does.
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, script := range []*redis.Script{claimScript, renewScript, completeScript, releaseScript, completeAgainScript, watchScript} {
		if err := script.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}
