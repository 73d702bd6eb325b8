-- claim: take a key, or report the record that holds it.
-- KEYS[1] record hash: state, fp, fence; in flight also token (empty once
--         released) and abandoned; once done also status, header, body.
--         An in-flight record's expiry is its lease plus abandoned, so the
--         lease left is PTTL - abandoned, on the server's clock.
-- KEYS[2] lease key of the two-key layout: read when the record holds no
--         live lease of its own (a claim a process of that layout made);
--         written only with ARGV[6]
-- ARGV[1] fingerprint of the claiming request
-- ARGV[2] token of the claiming request
-- ARGV[3] lease, in milliseconds
-- ARGV[4] lifetime of the in-flight record, in milliseconds (lease + abandoned)
-- ARGV[5] abandoned retention, in milliseconds
-- ARGV[6] '1' to write the lease key of the two-key layout too
-- returns {1, fence, lease ms left} when claimed: the key had no record, or an in-flight record whose
--         lease lapsed or was released, or one whose live lease is the caller's own (this call sent
--         again after its reply was lost; that lease is left as it is);
--         {0, 1, fingerprint, fence, lease ms left} when in flight under another's live lease;
--         {0, state, fingerprint, fence, retention ms left, status, header, body} when done.
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'fence', 'token', 'abandoned', 'status', 'header', 'body')
local state = rec[1]
if state == '1' then
  local left = 0
  if rec[4] and rec[4] ~= '' and rec[5] then
    left = redis.call('PTTL', KEYS[1]) - tonumber(rec[5])
  end
  if left <= 0 then
    left = redis.call('PTTL', KEYS[2])
  end
  if left > 0 then
    if rec[4] == ARGV[2] then
      return {1, tonumber(rec[3]), left}
    end
    return {0, 1, rec[2], tonumber(rec[3]), left}
  end
elseif state then
  return {0, tonumber(state), rec[2], tonumber(rec[3]), redis.call('PTTL', KEYS[1]), rec[6], rec[7], rec[8]}
end
local fence = 1
if state then
  fence = tonumber(rec[3]) + 1
end
redis.call('HSET', KEYS[1], 'state', 1, 'fp', ARGV[1], 'token', ARGV[2], 'fence', fence, 'abandoned', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[6] == '1' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return {1, fence, tonumber(ARGV[3])}
