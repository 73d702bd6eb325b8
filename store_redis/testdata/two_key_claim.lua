-- claim: take a key, or report the record that holds it.
-- KEYS[1] record hash: state, fp, token, fence; once done also status, header, body
-- KEYS[2] lease marker: the owner's token, expiring with the lease
-- ARGV[1] fingerprint of the claiming request
-- ARGV[2] token of the claiming request
-- ARGV[3] lease, in milliseconds
-- ARGV[4] lifetime of the in-flight record, in milliseconds (lease + abandoned retention)
-- returns {1, fence, lease ms left} when claimed: the key had no record, or an in-flight record whose
--         lease lapsed, or one whose live lease is the caller's own (this call sent again after its
--         reply was lost; that lease is left as it is);
--         {0, 1, fingerprint, fence, lease ms left} when in flight under another's live lease;
--         {0, state, fingerprint, fence, retention ms left, status, header, body} when done.
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'fence', 'status', 'header', 'body', 'token')
local state = rec[1]
if state == '1' then
  local left = redis.call('PTTL', KEYS[2])
  if left > 0 then
    if rec[7] == ARGV[2] then
      return {1, tonumber(rec[3]), left}
    end
    return {0, 1, rec[2], tonumber(rec[3]), left}
  end
elseif state then
  return {0, tonumber(state), rec[2], tonumber(rec[3]), redis.call('PTTL', KEYS[1]), rec[4], rec[5], rec[6]}
end
local fence = 1
if state then
  fence = tonumber(rec[3]) + 1
end
redis.call('HSET', KEYS[1], 'state', 1, 'fp', ARGV[1], 'token', ARGV[2], 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return {1, fence, tonumber(ARGV[3])}
