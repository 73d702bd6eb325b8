-- complete: turn the caller's in-flight record into a done one; follows owner.lua.
-- KEYS[1] record hash
-- KEYS[2] lease marker
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- ARGV[3] retention, in milliseconds
-- ARGV[4] state: 2 completed, 3 unreplayable
-- ARGV[5] status, ARGV[6] encoded header, ARGV[7] body (empty when unreplayable)
-- returns 1 when completed, false (nil) when the caller does not hold the key
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'status', ARGV[5], 'header', ARGV[6], 'body', ARGV[7])
redis.call('HDEL', KEYS[1], 'token')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
