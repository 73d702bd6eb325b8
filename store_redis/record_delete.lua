-- record_delete: delete the live record of KEYS[1]; follows
-- record_live.lua. A done record is removed with its tombstone, and so is
-- a tombstone alone. One in flight is released instead, its steps dropped,
-- by record_release.lua, which follows: its owner is refused from then on
-- and the next claim gets the next fence.
-- KEYS[3] the record's tombstone
-- ARGV[1] 1 to delete a record in flight, 0 to refuse
-- returns 0 when there is no live record, 1 when deleted, 2 when refused
if not rec and not v then
  return redis.call('DEL', KEYS[3])
end
if not rec then
  return 0
end
if rec.state ~= '1' then
  redis.call('DEL', KEYS[1], KEYS[3])
  return 1
end
if ARGV[1] ~= '1' then
  return 2
end
v = string.sub(v, 1, rec.at - 1)
