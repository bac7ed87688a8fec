#!lua
-- acquire_set: grant the leases on a set of keys, all or none, to one
-- acquisition, with one token. Each key's lease is an ordinary lease
-- record (see record.lua), held by the set's nonce.
--
-- KEYS     the records of the set's keys, in the order of the keys
-- ARGV[1]  owner
-- ARGV[2]  nonce
-- ARGV[3]  TTL in microseconds
--
-- Returns the token (an integer) when the set is granted or, for a nonce
-- that holds every key of it with one token, extended; or {index, token,
-- owner, remaining microseconds} of the first key (1-based, in the order
-- of KEYS) that another acquisition holds, changing nothing; owner is nil
-- for a key a hand-off offered to candidates (see handoff.lua), which no
-- set takes while the offer stands.
--
-- The token is above the last token of every key and never below the
-- clock (record_next_token). A nonce that holds only some of the keys (one
-- was force-released since) gets them all again with a new token.
local now = record_now()
local recs, last, mine, token = {}, 0, true, nil
for i, rec in ipairs(KEYS) do
  local r = record_read(rec, 'offer_until')
  recs[i] = r
  last = math.max(last, record_token(r))
  local left = record_left(r, now)
  if left > 0 and r[2] ~= ARGV[2] then
    return {i, record_token(r), r[4], left}
  end
  if r[3] == '-2' and (tonumber(r[6]) or 0) > now then
    -- A hand-off's offer stands: the key is its candidates', one by one.
    return {i, record_token(r), false, tonumber(r[6]) - now}
  end
  if left <= 0 or (token and r[1] ~= token) then
    mine = false
  end
  token = r[1]
end
if mine then
  -- The same acquisition asks again (a retry after an unanswered attempt):
  -- extend it and return its token.
  for _, rec in ipairs(KEYS) do
    redis.call('PERSIST', rec)
  end
  for _, rec in ipairs(KEYS) do
    record_extend(rec, now, now + ARGV[3])
  end
  return tonumber(token)
end
token = record_next_token(last, now)
for _, rec in ipairs(KEYS) do
  redis.call('PERSIST', rec)
end
for i, rec in ipairs(KEYS) do
  record_grant(rec, recs[i], token, ARGV[1], ARGV[2], now, now + ARGV[3])
end
return token
