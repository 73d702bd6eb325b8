-- renew: extend the caller's lease; follows owner.lua. The record's expiry
-- is set to the lease plus its abandoned retention, both from now.
-- KEYS[1] record hash
-- KEYS[2] lease key of the two-key layout, written with ARGV[4]
-- ARGV[1] token, ARGV[2] fencing number (checked by owner.lua)
-- ARGV[3] lease, in milliseconds from now
-- ARGV[4] '1' to write the lease key of the two-key layout too
-- returns 1 when renewed, false (nil) when the caller does not hold the key
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(rec[4]))
if ARGV[4] == '1' then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
end
return 1
