-- release: give up the caller's in-flight record so that a retry may claim
-- the key; follows owner.lua. The record itself stays, in flight with no
-- lease and no token, until its lifetime (lease + abandoned retention) ends:
-- the next claim takes it over as it would a lapsed lease, with the next
-- fencing number, so a released key's numbers never go back.
-- KEYS[1] record hash
-- KEYS[2] lease marker
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- returns 1 when released, false (nil) when the caller does not hold the key
redis.call('HDEL', KEYS[1], 'token')
redis.call('DEL', KEYS[2])
return 1
