package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script takes the record's key, its shard channel and its
// tombstone's key (Store.keys); the .lua files document their KEYS, ARGV
// and replies.
var (
	//go:embed record.lua
	recordLua string
	//go:embed record_claim.lua
	recordClaimLua string
	//go:embed record_owner.lua
	recordOwnerLua string
	//go:embed record_renew.lua
	recordRenewLua string
	//go:embed record_ack.lua
	recordAckLua string
	//go:embed record_step.lua
	recordStepLua string
	//go:embed record_complete.lua
	recordCompleteLua string
	//go:embed record_release.lua
	recordReleaseLua string
	//go:embed record_watch.lua
	recordWatchLua string
	//go:embed record_live.lua
	recordLiveLua string
	//go:embed record_inspect.lua
	recordInspectLua string
	//go:embed record_delete.lua
	recordDeleteLua string
)

var (
	claimScript = redis.NewScript(recordLua + recordClaimLua)
	watchScript = redis.NewScript(recordLua + recordWatchLua)
	// These reply 1 when done, nil when the caller does not hold the key.
	renewScript    = redis.NewScript(recordLua + recordOwnerLua + recordRenewLua)
	ackScript      = redis.NewScript(recordLua + recordOwnerLua + recordAckLua)
	completeScript = redis.NewScript(recordLua + recordCompleteLua)
	releaseScript  = redis.NewScript(recordLua + recordOwnerLua + recordReleaseLua)
	inspectScript  = redis.NewScript(recordLua + recordLiveLua + recordInspectLua)
	deleteScript   = redis.NewScript(recordLua + recordLiveLua + recordDeleteLua + recordReleaseLua)
	stepScript     = redis.NewScript(recordLua + recordOwnerLua + recordStepLua)
)

func allScripts() []*redis.Script {
	return []*redis.Script{claimScript, watchScript, renewScript, ackScript, stepScript, completeScript, releaseScript, inspectScript, deleteScript}
}
