-- record_delete: delete the live record of KEYS[1]; follows
-- record_live.lua. A done record is removed. One in flight is released
-- instead, by record_release.lua, which follows: its owner is refused from
-- then on and the next claim gets the next fence.
-- ARGV[1] 1 to delete a record in flight, 0 to refuse
-- returns 0 when there is no live record, 1 when deleted, 2 when refused
if not rec then
  return 0
end
if rec.state ~= '1' then
  redis.call('DEL', KEYS[1])
  return 1
end
if ARGV[1] ~= '1' then
  return 2
end
