-- record_completed: opens record_complete when Complete is sent again to
-- wait for replicas (WithReplicaAcks). A record already done under the
-- caller's fencing number holds the
-- caller's own completion: its expiry is written again unchanged, a write
-- that the WAIT sent after this script counts, and the script replies 1.
-- ARGV[2] fencing number of the caller
local sent = redis.pcall('GET', KEYS[1])
local done = type(sent) == 'string' and decode(sent)
if done and (done.state == '2' or done.state == '3') and tonumber(done.fence) == tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], math.max(1, redis.call('PTTL', KEYS[1])))
  return 1
end
