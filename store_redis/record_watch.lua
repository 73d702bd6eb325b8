-- record_watch: mark an in-flight record as waited for, so that its
-- complete and release publish on its channel. A string record gets its
-- waited field set, unless it is set already; a hash (written by an
-- earlier version, or with WithLegacyLeaseKeys) gets the field waited,
-- which ended.lua, closing the hash layout's complete and release, reads.
-- KEYS[1] record
-- returns 1 when the record is in flight with a token and now marked,
--         0 when it is not: missing, done or released
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  local h = redis.call('HMGET', KEYS[1], 'state', 'token')
  if h[1] ~= '1' or not h[2] or h[2] == '' then
    return 0
  end
  redis.call('HSET', KEYS[1], 'waited', 1)
  return 1
end
local rec = v and decode(v)
if not rec or rec.state ~= '1' or rec.token == '' then
  return 0
end
if rec.waited ~= '1' then
  redis.call('SET', KEYS[1], encode('1', rec.fence, rec.abandoned, '1', rec.status, rec.fp, rec.token, rec.header, ''), 'KEEPTTL')
end
return 1
