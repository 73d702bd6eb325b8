-- completed: opens the complete script when Complete is sent again to wait
-- for replicas (WithReplicaAcks). A record already done under the caller's
-- fencing number holds the caller's own completion, from an earlier send:
-- its expiry is written again unchanged, a write that the WAIT sent after
-- this script counts, and the script replies 1. Otherwise owner.lua and
-- complete.lua follow.
-- KEYS[1] record hash
-- ARGV[2] fencing number of the caller
local done = redis.pcall('HMGET', KEYS[1], 'state', 'fence')
if not done.err and (done[1] == '2' or done[1] == '3') and tonumber(done[2]) == tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], math.max(1, redis.call('PTTL', KEYS[1])))
  return 1
end
