-- record: the string a record is kept as (see record.go). It starts with
-- "state,fence,abandoned,waited,status,#fp,#token,#header;" and goes on
-- with the fingerprint, the token, the encoded header and the body.
-- decode returns the fields of v (the body starting at r.at), or nil when
-- v is not a record; encode builds a record from its fields, each a
-- string (a number is written by table.concat as %.14g would: a fence of
-- 10^14 as 1e+14, so a computed fence is formatted with %d first).
local function decode(v)
  local state, fence, abandoned, waited, status, nfp, ntoken, nheader, at =
    string.match(v, '^([123]),(%d+),(%d+),([01]),(%d+),(%d+),(%d+),(%d+);()')
  if not state or #fence > 15 or #abandoned > 15 or at + nfp + ntoken + nheader - 1 > #v then
    return nil
  end
  local r = {state = state, fence = fence, abandoned = abandoned, waited = waited, status = status}
  r.fp = string.sub(v, at, at + nfp - 1)
  at = at + nfp
  r.token = string.sub(v, at, at + ntoken - 1)
  at = at + ntoken
  r.header = string.sub(v, at, at + nheader - 1)
  r.at = at + nheader
  return r
end
local function encode(state, fence, abandoned, waited, status, fp, token, header, body)
  return table.concat({state, ',', fence, ',', abandoned, ',', waited, ',', status, ',',
    #fp, ',', #token, ',', #header, ';', fp, token, header, body})
end
-- A tombstone is its own key beside the record's, written with a done
-- record and outliving it (WithTombstones): "completed,fence,status;<fp>",
-- the completion in ms since the epoch. decodeTomb returns its fields, or
-- nil when t is not a tombstone.
local function decodeTomb(t)
  local completed, fence, status, at = string.match(t, '^(%d+),(%d+),(%d+);()')
  if not completed then
    return nil
  end
  return {completed = completed, fence = fence, status = status, fp = string.sub(t, at)}
end
