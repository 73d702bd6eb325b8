-- record_complete: turn the caller's in-flight record into a done one,
-- which keeps the caller's token and fencing number but no abandoned
-- retention, and expires after its retention. A record already done under
-- the caller's token and fencing number holds the caller's own completion
-- (a Complete sent again after its reply was lost): its expiry is written
-- again unchanged, a write that a WAIT sent after this script counts
-- (WithReplicaAcks), and the script replies 1.
-- KEYS[1] record
-- KEYS[2] the record's channel, published on when a watcher marked the record
-- KEYS[3] the record's tombstone (record.lua), written when ARGV[8] is above 0
-- ARGV[1] token of the caller, ARGV[2] fencing number of the caller
-- ARGV[3] retention, in milliseconds
-- ARGV[4] state: 2 completed, 3 unreplayable
-- ARGV[5] status, ARGV[6] encoded header, ARGV[7] body (empty when unreplayable)
-- ARGV[8] how long the tombstone outlives the retention, in milliseconds; 0 for none
-- returns 1 when completed, false (nil) when the caller does not hold the key
local v = redis.pcall('GET', KEYS[1])
local rec = type(v) == 'string' and decode(v)
if not rec or rec.token ~= ARGV[1] or ARGV[1] == '' or tonumber(rec.fence) ~= tonumber(ARGV[2]) then
  return false
end
if rec.state ~= '1' then
  redis.call('PEXPIRE', KEYS[1], math.max(1, redis.call('PTTL', KEYS[1])))
  return 1
end
local done = encode(ARGV[4], rec.fence, '0', '0', ARGV[5], rec.fp, rec.token, ARGV[6], ARGV[7])
if redis.pcall('SET', KEYS[1], done, 'PX', ARGV[3]).err then
  -- Memory is full: Redis refuses a script's first write that may grow
  -- it, but not one after another write. Refused, the response would be
  -- lost, and the request run again once its lease lapsed.
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('SET', KEYS[1], done, 'PX', ARGV[3])
end
if tonumber(ARGV[8]) > 0 then
  -- Written second, so never refused when memory is full (see above).
  local now = redis.call('TIME')
  local completed = now[1] .. string.format('%03d', math.floor(now[2] / 1000))
  redis.call('SET', KEYS[3], table.concat({completed, ',', rec.fence, ',', ARGV[5], ';', rec.fp}),
    'PX', tonumber(ARGV[3]) + tonumber(ARGV[8]))
end
if rec.waited == '1' then
  redis.call('SPUBLISH', KEYS[2], '')
end
return 1
