package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each operation is one Lua script, run with EVALSHA (and EVAL once, the
// first time a server has not seen it). Every script is given the same
// three names, which share a hash tag and so a Cluster slot: the key of
// one record, its lease key of the two-key layout, and its shard channel,
// on which complete and release publish when a watcher marked the record.
// The .lua files document their KEYS, ARGV and replies.
var (
	//go:embed claim.lua
	claimLua string
	//go:embed owner.lua
	ownerLua string
	//go:embed renew.lua
	renewLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string
	//go:embed ended.lua
	endedLua string
	//go:embed completed.lua
	completedLua string
	//go:embed watch.lua
	watchLua string

	// claimScript replies {1, fence, ms left} when it claimed the key, or the
	// existing record: {0, state, fingerprint, fence, ms left[, status,
	// header, body]}.
	claimScript = redis.NewScript(claimLua)
	// renewScript, completeScript and releaseScript open with the owner
	// guard and reply 1 when done, nil when the caller does not hold the
	// key; complete and release end with the same tail.
	renewScript    = redis.NewScript(ownerLua + renewLua)
	completeScript = redis.NewScript(ownerLua + completeLua + endedLua)
	releaseScript  = redis.NewScript(ownerLua + releaseLua + endedLua)
	// completeAgainScript is completeScript as Complete sends it again
	// (WithReplicaAcks): it also replies 1 when the record is already done
	// under the caller's fencing number.
	completeAgainScript = redis.NewScript(completedLua + ownerLua + completeLua + endedLua)
	// watchScript marks an in-flight record as waited for and replies 1,
	// or replies 0 when the record is not in flight.
	watchScript = redis.NewScript(watchLua)
)
