-- release: give up the caller's in-flight record so that a retry may claim
-- the key; follows owner.lua, and ended.lua follows it. The record itself
-- stays, in flight with no token and so no lease, until its lifetime
-- (lease + abandoned retention) ends: the next claim takes it over as it
-- would a lapsed lease, with the next fencing number, so a released key's
-- numbers never go back.
-- KEYS[1] record hash
-- KEYS[2] lease key of the two-key layout, deleted with ARGV[3]
-- KEYS[3] the record's channel, published on when a watcher marked the
--         record; the mark goes with the token, so that the next claim's
--         completion publishes only if that claim is waited for
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- ARGV[3] '1' when the lease key of the two-key layout is written too
-- returns 1 when released, false (nil) when the caller does not hold the key
redis.call('HDEL', KEYS[1], 'token', 'waited')
local twoKey = ARGV[3]
