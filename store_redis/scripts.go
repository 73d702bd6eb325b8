package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each operation but a decided claim is one Lua script, run with EVALSHA
// (and EVAL once, the first time a server has not seen it). Every script
// is given the same two names, which share a hash tag and so a Cluster
// slot: the key of one record, and its shard channel, on which complete
// and release publish when a watcher marked the record. The .lua files
// document their KEYS, ARGV and replies.
var (
	//go:embed record.lua
	recordLua string
	//go:embed record_claim.lua
	recordClaimLua string
	//go:embed record_owner.lua
	recordOwnerLua string
	//go:embed record_renew.lua
	recordRenewLua string
	//go:embed record_complete.lua
	recordCompleteLua string
	//go:embed record_release.lua
	recordReleaseLua string
	//go:embed record_watch.lua
	recordWatchLua string
)

var (
	// claimScript replies {1, fence, ms left} when it claimed the key, or
	// the existing record: {0, state, fingerprint, fence, ms left[,
	// status, header, body]}.
	claimScript = redis.NewScript(recordLua + recordClaimLua)
	// watchScript marks an in-flight record as waited for and replies 1,
	// or replies 0 when the record is not in flight.
	watchScript = redis.NewScript(recordLua + recordWatchLua)
	// renewScript and releaseScript open with the owner guard; they and
	// completeScript reply 1 when done, nil when the caller does not hold
	// the key. completeScript also replies 1 to a Complete sent again by
	// the owner that completed the record.
	renewScript    = redis.NewScript(recordLua + recordOwnerLua + recordRenewLua)
	completeScript = redis.NewScript(recordLua + recordCompleteLua)
	releaseScript  = redis.NewScript(recordLua + recordOwnerLua + recordReleaseLua)
)

// allScripts returns every script of the store.
func allScripts() []*redis.Script {
	return []*redis.Script{claimScript, watchScript, renewScript, completeScript, releaseScript}
}
