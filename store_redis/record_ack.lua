-- record_ack: a write that changes nothing, so that a WAIT after it on its
-- connection counts the replicas that hold the caller's claim, written
-- before it; follows record_owner.lua. The record's expiry is set to the
-- time it has left.
-- returns 1, false (nil) when the caller does not hold the key
local left = redis.call('PTTL', KEYS[1])
if left < 1 then return false end
redis.call('PEXPIRE', KEYS[1], left)
return 1
