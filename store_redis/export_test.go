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
	for _, script := range allScripts() {
		if err := script.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// ScriptedClaims makes every Claim of s run the claim script, as on a
// server before 7.0, and returns s.
func ScriptedClaims(s *Store) *Store {
	s.atOnce.Store(false)
	return s
}

// ClaimsWaiting and CompletesWaiting report how many calls of s wait for
// a lane.
func ClaimsWaiting(s *Store) int { return s.claims.Waiting() }

func CompletesWaiting(s *Store) int { return s.completes.Waiting() }

// RecheckReplicationNow makes the next write of s that finds no replica
// ask the server again, as it does once per recheckEvery.
func RecheckReplicationNow(s *Store) { s.acks.rechecked.Store(0) }
