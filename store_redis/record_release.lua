-- record_release: give up the caller's in-flight record so that a retry
-- may claim the key; follows record_owner.lua (or record_delete.lua). The record stays, in
-- flight with no token and so no lease, and its expiry unchanged: the
-- next claim takes it over with the next fencing number and the steps,
-- the record's tail. The watchers' mark goes with the token.
-- KEYS[2] the record's channel, published on when a watcher marked the record
-- returns 1 when released, false (nil) when the caller does not hold the key
local released = encode('1', rec.fence, rec.abandoned, '0', '0', rec.fp, '', '', string.sub(v, rec.at))
if redis.pcall('SET', KEYS[1], released, 'KEEPTTL').err then
  -- Memory is full: as in record_complete.lua, a write Redis allows then
  -- (the expiry the record has) lets the SET through.
  -- (At least 1 ms: PEXPIRE 0 would delete the record, and KEEPTTL then
  -- keep no expiry.)
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), 1))
  redis.call('SET', KEYS[1], released, 'KEEPTTL')
end
if rec.waited == '1' then
  redis.call('SPUBLISH', KEYS[2], '')
end
return 1
