-- record_watch: mark an in-flight record as waited for, so that its
-- complete and release publish on its channel: its waited field is set,
-- unless it is set already. Its steps, the record's tail, stay.
-- KEYS[1] record
-- returns 1 when the record is in flight with a token and now marked,
--         0 when it is not: missing, done or released
local v = redis.pcall('GET', KEYS[1])
local rec = type(v) == 'string' and decode(v)
if not rec or rec.state ~= '1' or rec.token == '' then
  return 0
end
if rec.waited ~= '1' then
  redis.call('SET', KEYS[1], encode('1', rec.fence, rec.abandoned, '1', rec.status, rec.fp, rec.token, rec.header, string.sub(v, rec.at)), 'KEEPTTL')
end
return 1
