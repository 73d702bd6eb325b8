-- record_inspect: report the live record of KEYS[1]; follows
-- record_live.lua.
-- KEYS[3] the record's tombstone (record.lua), read when there is no record
-- returns {} when there is neither, else {state, fingerprint, fence, ms left,
--         status, header, body}, the body being the steps while in flight
--         (record_step.lua); a tombstone's has state 4 and the completion
--         in ms since the epoch for its body
if not rec and not v then
  local t = redis.call('GET', KEYS[3])
  local tomb = t and decodeTomb(t)
  if tomb then
    return {4, tomb.fp, tonumber(tomb.fence), redis.call('PTTL', KEYS[3]), tomb.status, '', tomb.completed}
  end
end
if not rec then
  return {}
end
return {tonumber(rec.state), rec.fp, tonumber(rec.fence), left, rec.status, rec.header, string.sub(v, rec.at)}
