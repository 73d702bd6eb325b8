-- record_claim: take a key, or report the record that holds it. Claim
-- runs it when its pipeline (SET NX GET, PTTL) could not decide: the
-- record's lease lapsed or was released, or the server refused the SET
-- (maxmemory, or a server before 7.0); and always when the store keeps
-- tombstones, which the SET cannot see.
-- KEYS[1] record (record.lua). A takeover keeps the watchers' mark
--         (waited), so that its completion wakes them.
-- KEYS[3] tombstone (record.lua), read when ARGV[6] is 1 and there is no record
-- ARGV[1] fingerprint, ARGV[2] token, ARGV[3] lease in milliseconds,
-- ARGV[4] lifetime of the in-flight record (lease + abandoned),
-- ARGV[5] abandoned retention, in milliseconds, ARGV[6] 1 if tombstones are kept, else 0
-- returns {1, fence, lease ms left, steps} when claimed: the key had no record, or an in-flight
--         record whose lease lapsed or was released, whose steps it keeps, or one whose live lease
--         is the caller's own (this call sent again after its reply was lost; that lease is left as
--         it is); steps are the record's tail (record_step.lua), empty for a new record;
--         {0, 1, fingerprint, fence, lease ms left} when in flight under another's live lease;
--         {0, state, fingerprint, fence, retention ms left, status, header, body} when done;
--         {0, 4, fingerprint, fence, tombstone ms left, status, completion ms since the epoch} when
--         there is only a tombstone.
local v = redis.call('GET', KEYS[1])
local rec = v and decode(v)
if v and not rec then
  return redis.error_reply('the key holds no record')
end
if rec and rec.state == '1' then
  local left = 0
  if rec.token ~= '' then
    left = redis.call('PTTL', KEYS[1]) - tonumber(rec.abandoned)
  end
  if left > 0 then
    if rec.token == ARGV[2] then
      return {1, tonumber(rec.fence), left, string.sub(v, rec.at)}
    end
    return {0, 1, rec.fp, tonumber(rec.fence), left}
  end
elseif rec then
  return {0, tonumber(rec.state), rec.fp, tonumber(rec.fence), redis.call('PTTL', KEYS[1]), rec.status, rec.header, string.sub(v, rec.at)}
end
if not v and ARGV[6] == '1' then
  local t = redis.call('GET', KEYS[3])
  local tomb = t and decodeTomb(t)
  if tomb then
    return {0, 4, tomb.fp, tonumber(tomb.fence), redis.call('PTTL', KEYS[3]), tomb.status, tomb.completed}
  end
end
local taken, steps = 1, ''
if rec then
  taken, steps = tonumber(rec.fence) + 1, string.sub(v, rec.at)
end
redis.call('SET', KEYS[1], encode('1', string.format('%d', taken), ARGV[5], rec and rec.waited or '0', '0', ARGV[1], ARGV[2], '', steps), 'PX', ARGV[4])
return {1, taken, tonumber(ARGV[3]), steps}
