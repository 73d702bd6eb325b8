-- record_renew: extend the caller's lease; follows record_owner.lua. The
-- record's expiry is set to the lease plus its abandoned retention, both
-- from now.
-- ARGV[3] lease, in milliseconds from now
-- returns 1 when renewed, false (nil) when the caller does not hold the key
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(rec.abandoned))
return 1
