-- record_inspect: report the live record of KEYS[1]; follows
-- record_live.lua.
-- returns {} when there is none, else {state, fingerprint, fence, ms left,
--         status, header, body}
if not rec then
  return {}
end
return {tonumber(rec.state), rec.fp, tonumber(rec.fence), left, rec.status, rec.header, string.sub(v, rec.at)}
