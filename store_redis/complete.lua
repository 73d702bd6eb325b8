-- complete: turn the caller's in-flight record into a done one; follows
-- owner.lua, and ended.lua follows it.
-- KEYS[1] record hash
-- KEYS[2] lease key of the two-key layout, deleted with ARGV[8]
-- KEYS[3] the record's channel, published on when a watcher marked the record
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- ARGV[3] retention, in milliseconds
-- ARGV[4] state: 2 completed, 3 unreplayable
-- ARGV[5] status, ARGV[6] encoded header, ARGV[7] body (empty when unreplayable)
-- ARGV[8] '1' when the lease key of the two-key layout is written too
-- returns 1 when completed, false (nil) when the caller does not hold the key
-- The PEXPIRE comes first: when memory is full, Redis refuses a script's
-- first write that may grow it (the HSET), but not one after another
-- write, so the response is kept rather than lost.
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'status', ARGV[5], 'header', ARGV[6], 'body', ARGV[7], 'token', '')
local twoKey = ARGV[8]
