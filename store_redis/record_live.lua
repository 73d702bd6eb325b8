-- record_live: read the live record of KEYS[1]. rec (record.lua) is nil
-- unless there is one: a record in flight under a token whose lease runs,
-- or a done one; left is then the lease or retention left, in milliseconds.
local v = redis.pcall('GET', KEYS[1])
local rec = type(v) == 'string' and decode(v)
local left = 0
if rec then
  left = redis.call('PTTL', KEYS[1])
  if rec.state == '1' and rec.token == '' then
    left = 0
  elseif rec.state == '1' then
    left = left - tonumber(rec.abandoned)
  end
  if left <= 0 then
    rec = nil
  end
end
