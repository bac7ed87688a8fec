#!lua flags=no-writes
-- inspect: read the lease recorded in the hash KEYS[1] (see record.lua for
-- its fields) without changing it. It never returns the nonce.
--
-- KEYS[1]  the lease record
--
-- Returns {token, owner, remaining microseconds}: token is the last token
-- issued (nil if the record is missing); owner and remaining describe the
-- holder and are nil and 0 when the lease is free.
local r = redis.call('HMGET', KEYS[1], 'token', 'owner', 'expires')
if not r[1] then
  return {false, false, 0}
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local left = (tonumber(r[3]) or 0) - now
if left <= 0 then
  return {tonumber(r[1]), false, 0}
end
return {tonumber(r[1]), r[2], left}
