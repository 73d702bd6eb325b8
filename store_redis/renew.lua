-- renew: extend the caller's lease; follows owner.lua.
-- KEYS[1] record hash
-- KEYS[2] lease marker
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- ARGV[3] lease, in milliseconds from now
-- ARGV[4] lifetime of the in-flight record, in milliseconds (lease + abandoned retention)
-- returns 1 when renewed, false (nil) when the caller does not hold the key
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
