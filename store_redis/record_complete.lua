-- record_complete: turn the caller's in-flight record into a done one;
-- follows record_owner.lua. The done record keeps no token and no
-- abandoned retention, and expires after its retention.
-- KEYS[3] the record's channel, published on when a watcher marked the record
-- ARGV[3] retention, in milliseconds
-- ARGV[4] state: 2 completed, 3 unreplayable
-- ARGV[5] status, ARGV[6] encoded header, ARGV[7] body (empty when unreplayable)
-- returns 1 when completed, false (nil) when the caller does not hold the key
redis.call('SET', KEYS[1], encode(ARGV[4], rec.fence, '0', '0', ARGV[5], rec.fp, '', ARGV[6], ARGV[7]), 'PX', ARGV[3])
if rec.waited == '1' then
  redis.call('SPUBLISH', KEYS[3], '')
end
return 1
