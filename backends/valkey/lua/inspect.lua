#!lua flags=no-writes
-- inspect: read the lease recorded in the hash KEYS[1] (see record.lua for
-- its fields) without changing it. It never returns the nonce.
--
-- KEYS[1]  the lease record
--
-- Returns {token, owner, remaining microseconds, acquired, renewed,
-- transitions, ending, candidates, preferred}: token is the last token
-- issued (nil if the record is missing); owner and remaining describe the
-- holder and are nil and 0 when the lease is free, or, while a hand-off's
-- offer stands, the owner who handed it off and what is left of the
-- window; acquired, renewed and transitions are the record's fields (0
-- where a record of an older version lacks them); ending says how the
-- last acquisition ended, as lease.Ending numbers it (0 held or unknown, 1
-- released, 2 expired, 3 force-released, 4 handed off); candidates are
-- those of a standing offer joined by "\n" (nil otherwise); preferred is
-- the preferred candidate while its preference stands (nil otherwise).
local r = redis.call('HMGET', KEYS[1], 'token', 'owner', 'expires', 'acquired', 'renewed', 'transitions',
  'offer', 'offer_until', 'pref', 'pref_until')
if not r[1] then
  return {false, false, 0, 0, 0, 0, 0, false, false}
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local expires = tonumber(r[3]) or 0
local left = expires - now
local owner, ending, offer, pref = r[2], 0, false, false
if (tonumber(r[10]) or 0) > now then
  pref = r[9]
end
if left <= 0 then
  owner, left = false, 0
  if expires == 0 then
    ending = 1
  elseif expires == -1 then
    ending = 3
  elseif expires == -2 then
    ending = 4
    local window = (tonumber(r[8]) or 0) - now
    if window > 0 then
      owner, left, offer = r[2], window, r[7]
    end
  else
    ending = 2
  end
end
return {tonumber(r[1]), owner, left, tonumber(r[4]) or 0, tonumber(r[5]) or 0, tonumber(r[6]) or 0, ending, offer, pref}
