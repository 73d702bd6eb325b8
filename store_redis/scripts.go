package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each operation but a decided claim is one Lua script, run with EVALSHA
// (and EVAL once, the first time a server has not seen it). Every script
// is given the same three names, which share a hash tag and so a Cluster
// slot: the key of one record, its lease key of the two-key layout, and
// its shard channel, on which complete and release publish when a watcher
// marked the record. The .lua files document their KEYS, ARGV and
// replies. The claim and watch scripts read both layouts; those that
// write a record of the hash layout (owner.lua and the others without the
// record_ prefix) serve WithLegacyLeaseKeys, those of the string layout
// (record.lua and record_*.lua) every other store.
var (
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
	// status, header, body]}. It reads both layouts, and writes the one
	// its last argument asks for.
	claimScript = redis.NewScript(recordLua + recordClaimLua)
	// watchScript marks an in-flight record of either layout as waited for
	// and replies 1, or replies 0 when the record is not in flight.
	watchScript = redis.NewScript(recordLua + recordWatchLua)
)

// scripts are the Lua scripts that write a record of one layout.
type scripts struct {
	// renew, complete and release open with the owner guard and reply 1
	// when done, nil when the caller does not hold the key.
	renew, complete, release *redis.Script
	// completeAgain is complete as Complete sends it again
	// (WithReplicaAcks): it also replies 1 when the record is already done
	// under the caller's fencing number.
	completeAgain *redis.Script
}

var (
	// hashScripts keep a record as a hash, as earlier versions read it.
	hashScripts = scripts{
		renew:         redis.NewScript(ownerLua + renewLua),
		complete:      redis.NewScript(ownerLua + completeLua + endedLua),
		release:       redis.NewScript(ownerLua + releaseLua + endedLua),
		completeAgain: redis.NewScript(completedLua + ownerLua + completeLua + endedLua),
	}
	// recordComplete is complete and completeAgain of the string layout:
	// it replies 1 to a Complete sent again by the owner that completed
	// the record.
	recordComplete = redis.NewScript(recordLua + recordCompleteLua)
	// recordScripts keep a record as a string (record.go).
	recordScripts = scripts{
		renew:         redis.NewScript(recordLua + recordOwnerLua + recordRenewLua),
		complete:      recordComplete,
		release:       redis.NewScript(recordLua + recordOwnerLua + recordReleaseLua),
		completeAgain: recordComplete,
	}
)

// allScripts returns every script of the store.
func allScripts() []*redis.Script {
	return []*redis.Script{claimScript, watchScript,
		hashScripts.renew, hashScripts.complete, hashScripts.release, hashScripts.completeAgain,
		recordScripts.renew, recordScripts.complete, recordScripts.release, recordScripts.completeAgain}
}
