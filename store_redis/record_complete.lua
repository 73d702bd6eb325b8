-- record_complete: turn the caller's in-flight record into a done one;
-- follows record_owner.lua. The done record keeps no token and no
-- abandoned retention, and expires after its retention.
-- KEYS[2] the record's channel, published on when a watcher marked the record
-- ARGV[3] retention, in milliseconds
-- ARGV[4] state: 2 completed, 3 unreplayable
-- ARGV[5] status, ARGV[6] encoded header, ARGV[7] body (empty when unreplayable)
-- returns 1 when completed, false (nil) when the caller does not hold the key
local done = encode(ARGV[4], rec.fence, '0', '0', ARGV[5], rec.fp, '', ARGV[6], ARGV[7])
if redis.pcall('SET', KEYS[1], done, 'PX', ARGV[3]).err then
  -- Memory is full: Redis refuses a script's first write that may grow
  -- it, but not one after another write. Refused, the response would be
  -- lost, and the request run again once its lease lapsed.
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('SET', KEYS[1], done, 'PX', ARGV[3])
end
if rec.waited == '1' then
  redis.call('SPUBLISH', KEYS[2], '')
end
return 1
