#!lua flags=no-writes
-- inspect: read the lease recorded in the hash KEYS[1] (see record.lua for
-- its fields) without changing it. It never returns the nonce.
--
-- KEYS[1]  the lease record
--
-- Returns {token, owner, remaining microseconds, acquired, renewed,
-- transitions}: token is the last token issued (nil if the record is
-- missing); owner and remaining describe the holder and are nil and 0 when
-- the lease is free; acquired, renewed and transitions are the record's
-- fields (0 where a record of an older version lacks them).
local r = redis.call('HMGET', KEYS[1], 'token', 'owner', 'expires', 'acquired', 'renewed', 'transitions')
if not r[1] then
  return {false, false, 0, 0, 0, 0}
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local left = (tonumber(r[3]) or 0) - now
local owner = r[2]
if left <= 0 then
  owner, left = false, 0
end
return {tonumber(r[1]), owner, left, tonumber(r[4]) or 0, tonumber(r[5]) or 0, tonumber(r[6]) or 0}
