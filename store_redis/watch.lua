-- watch: mark an in-flight record as waited for, so that its complete and
-- release publish on its channel. Watch runs it once subscribed to that
-- channel, so no completion falls between the subscription and the mark.
-- A record in flight with a token is marked, whether its lease is its own
-- or a lease key of the two-key layout, and even if that lease has just
-- lapsed: the caller found it in flight a moment ago, and a lapsed lease
-- publishes nothing (the caller's polling finds it claimable).
-- KEYS[1] record hash
-- returns 1 when the record is in flight and now marked (field waited),
--         0 when it is not: missing, done or released
local rec = redis.call('HMGET', KEYS[1], 'state', 'token')
if rec[1] ~= '1' or not rec[2] or rec[2] == '' then
  return 0
end
redis.call('HSET', KEYS[1], 'waited', 1)
return 1
