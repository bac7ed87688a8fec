#!lua
-- acquire: grant the lease recorded in the hash KEYS[1] (see record.lua
-- for its fields) to one acquisition.
--
-- KEYS[1]  the lease record
-- ARGV[1]  owner
-- ARGV[2]  nonce
-- ARGV[3]  TTL in microseconds
-- ARGV[4]  "1" to record the owner as the key's preferred candidate, for
--          the TTL, if another acquisition holds the lease; "0" not to
-- ARGV[5]  the record's shard channel (same hash slot), to announce a
--          grant to a new acquisition and a newly preferred candidate on
--
-- Returns the token (an integer) when the lease is granted or, for the same
-- nonce, extended; {token, owner, remaining microseconds} of the current
-- holder when another acquisition holds the lease; or {token, nil,
-- remaining microseconds of the window, candidates joined by "\n"} when a
-- hand-off's offer stands and the owner is none of its candidates.
--
-- While an offer stands (expires -2 and offer_until ahead), a candidate is
-- granted the offered token itself; once it lapsed, anyone is granted the
-- next token. Granting or extending first removes any TTL the record
-- carries from an ended lease (PERSIST), and announces a grant (SPUBLISH),
-- before the first HSET: a user refused either fails before anything is
-- written.
local rec = KEYS[1]
local r = record_read(rec, 'offer', 'offer_until', 'pref', 'pref_until')
local now = record_now()
local last = record_token(r)
local left = record_left(r, now)
if left > 0 then
  if r[2] ~= ARGV[2] then
    if ARGV[4] == '1' then
      -- Announce a preferred candidate that is new, or back after its
      -- preference lapsed; a standing one only gets its time extended.
      if r[8] ~= ARGV[1] or (tonumber(r[9]) or 0) <= now then
        record_changed(ARGV[5], 'preferred')
      end
      redis.call('HSET', rec, 'pref', ARGV[1], 'pref_until', now + ARGV[3])
    end
    return {last, r[4], left}
  end
  -- The same acquisition asks again (a retry after an unanswered attempt):
  -- extend it and return its token.
  redis.call('PERSIST', rec)
  record_extend(rec, now, now + ARGV[3])
  return last
end
local token = nil
if r[3] == '-2' then
  local window = (tonumber(r[7]) or 0) - now
  if window > 0 then
    if not string.find('\n' .. r[6] .. '\n', '\n' .. ARGV[1] .. '\n', 1, true) then
      return {last, false, window, r[6]}
    end
    token = last
  end
end
token = token or record_next_token(last, now)
redis.call('PERSIST', rec)
record_changed(ARGV[5], 'acquired')
if r[8] == ARGV[1] then
  -- The preferred candidate got the key: it is preferred no more.
  record_grant(rec, r, token, ARGV[1], ARGV[2], now, now + ARGV[3], 'pref_until', 0)
else
  record_grant(rec, r, token, ARGV[1], ARGV[2], now, now + ARGV[3])
end
return token
