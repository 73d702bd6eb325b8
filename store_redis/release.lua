-- release: delete the caller's in-flight record; follows owner.lua.
-- KEYS[1] record hash
-- KEYS[2] lease marker
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- returns 1 when released, false (nil) when the caller does not hold the key
redis.call('DEL', KEYS[1], KEYS[2])
return 1
