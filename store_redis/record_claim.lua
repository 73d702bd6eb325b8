-- record_claim: take a key, or report the record that holds it. Claim
-- runs it when its pipeline (SET NX GET, PTTL) could not decide: the
-- record is a hash of an earlier layout, its lease lapsed or was released,
-- the server refused the SET (maxmemory, or a server before 7.0); and for
-- every claim with WithReplicaAcks or WithLegacyLeaseKeys.
-- KEYS[1] record: a string (record.lua), or a hash of the hash layout
--         (state, fp, fence, token, abandoned, waited; once done status,
--         header, body). A claim writes a string, replacing a hash, or with
--         ARGV[6] a hash, replacing a string. A takeover keeps the
--         watchers' mark (waited), so that its completion wakes them.
-- KEYS[2] lease key of the two-key layout: read for a hash record whose
--         lease is not its own; written with ARGV[6], deleted when a hash
--         record is taken over without it
-- ARGV[1] fingerprint, ARGV[2] token, ARGV[3] lease in milliseconds,
-- ARGV[4] lifetime of the in-flight record (lease + abandoned),
-- ARGV[5] abandoned retention, in milliseconds,
-- ARGV[6] '1' to write the hash layout and its lease key
--         (WithLegacyLeaseKeys)
-- returns {1, fence, lease ms left} when claimed: the key had no record, or an in-flight record whose
--         lease lapsed or was released, or one whose live lease is the caller's own (this call sent
--         again after its reply was lost; that lease is left as it is);
--         {0, 1, fingerprint, fence, lease ms left} when in flight under another's live lease;
--         {0, state, fingerprint, fence, retention ms left, status, header, body} when done.
local v = redis.pcall('GET', KEYS[1])
local hash = type(v) == 'table'
local state, fp, fence, token, abandoned, status, header, body, waited
if hash then
  local h = redis.call('HMGET', KEYS[1], 'state', 'fp', 'fence', 'token', 'abandoned', 'status', 'header', 'body', 'waited')
  state, fp, fence, token, abandoned, status, header, body = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
  waited = h[9] and '1'
elseif v then
  local rec = decode(v)
  if not rec then
    return redis.error_reply('the key holds no record')
  end
  state, fp, fence, token, abandoned, status, header = rec.state, rec.fp, rec.fence, rec.token, rec.abandoned, rec.status, rec.header
  body, waited = string.sub(v, rec.at), rec.waited
end
if state == '1' then
  local left = 0
  if token and token ~= '' and abandoned then
    left = redis.call('PTTL', KEYS[1]) - tonumber(abandoned)
  end
  if left <= 0 and hash then
    left = redis.call('PTTL', KEYS[2])
  end
  if left > 0 then
    if token == ARGV[2] then
      return {1, tonumber(fence), left}
    end
    return {0, 1, fp, tonumber(fence), left}
  end
elseif state then
  return {0, tonumber(state), fp, tonumber(fence), redis.call('PTTL', KEYS[1]), status, header, body}
end
local taken = 1
if state then
  taken = tonumber(fence) + 1
end
if ARGV[6] == '1' then
  if v and not hash then
    redis.call('DEL', KEYS[1])
  end
  redis.call('HSET', KEYS[1], 'state', 1, 'fp', ARGV[1], 'token', ARGV[2], 'fence', string.format('%d', taken), 'abandoned', ARGV[5])
  if waited == '1' and not hash then
    redis.call('HSET', KEYS[1], 'waited', 1)
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {1, taken, tonumber(ARGV[3])}
end
if hash then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[1], encode('1', string.format('%d', taken), ARGV[5], waited or '0', '0', ARGV[1], ARGV[2], '', ''), 'PX', ARGV[4])
return {1, taken, tonumber(ARGV[3])}
