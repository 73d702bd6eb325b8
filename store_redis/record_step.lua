-- record_step: record a step after the steps of the caller's in-flight
-- record; follows record_owner.lua. The steps are the record's tail, where
-- a done record keeps its body (record.go), so APPEND adds one, keeping
-- the expiry, and the claim, the release and the watchers' mark keep them.
-- ARGV[3] the step's name, ARGV[4] its result, ARGV[5] 1 if its error is
-- final, else 0, ARGV[6] the most steps a record keeps
-- returns 1 when recorded, or recorded already under that name;
--         0 when the record holds the most steps already;
--         false (nil) when the caller does not hold the key
local at, count = rec.at, 0
while at <= #v do
  local nname, nresult, from = string.match(v, '^(%d+),(%d+),[01];()', at)
  if not nname then
    return redis.error_reply('the record holds malformed steps')
  end
  if string.sub(v, from, from + nname - 1) == ARGV[3] then
    return 1
  end
  at, count = from + nname + nresult, count + 1
end
if count >= tonumber(ARGV[6]) then
  return 0
end
redis.call('APPEND', KEYS[1], table.concat({#ARGV[3], ',', #ARGV[4], ',', ARGV[5], ';', ARGV[3], ARGV[4]}))
return 1
