-- record_owner: the guard that opens renew, complete and release of a
-- string record. It returns false (a nil reply) unless the record is in
-- flight under the caller's token and fencing number, a token never being
-- empty; rec then holds its fields (record.lua).
-- KEYS[1] record
-- ARGV[1] token of the caller
-- ARGV[2] fencing number of the caller
local v = redis.pcall('GET', KEYS[1])
local rec = type(v) == 'string' and decode(v)
if not rec or rec.state ~= '1' or rec.token ~= ARGV[1] or ARGV[1] == '' or tonumber(rec.fence) ~= tonumber(ARGV[2]) then
  return false
end
