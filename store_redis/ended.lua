-- ended: the tail of complete and release, which set twoKey to their ARGV
-- flag of the two-key layout. It deletes the lease key of that layout when
-- twoKey is '1', publishes on the record's channel when a watcher marked
-- the record (rec[5], read by owner.lua), and returns 1.
-- KEYS[2] lease key of the two-key layout
-- KEYS[3] the record's channel
if twoKey == '1' then
  redis.call('DEL', KEYS[2])
end
if rec[5] then
  redis.call('SPUBLISH', KEYS[3], '')
end
return 1
