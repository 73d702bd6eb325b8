-- owner: the guard that opens renew, complete and release. It returns false
-- (a nil reply) unless the record is in flight under the caller's token and
-- fencing number, a token never being empty; rec then holds state, token,
-- fence, abandoned and waited (set when a watcher marked the record:
-- ended.lua, which closes complete and release, then publishes on its
-- channel).
-- KEYS[1] record hash; a string record (a takeover by a store of the
--         string layout) is not the caller's either
-- ARGV[1] token of the caller
-- ARGV[2] fencing number of the caller
local rec = redis.pcall('HMGET', KEYS[1], 'state', 'token', 'fence', 'abandoned', 'waited')
if rec.err or rec[1] ~= '1' or rec[2] ~= ARGV[1] or ARGV[1] == '' or tonumber(rec[3]) ~= tonumber(ARGV[2]) then
  return false
end
