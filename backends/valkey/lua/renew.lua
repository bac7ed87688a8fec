#!lua
-- renew: extend one acquisition of the lease recorded in the hash KEYS[1]
-- (see acquire.lua for its fields).
--
-- KEYS[1]  the lease record
-- ARGV[1]  nonce
-- ARGV[2]  token (decimal)
-- ARGV[3]  TTL in microseconds
--
-- Returns 1 if renewed, 2 if the acquisition expired (or was released), 3
-- if another acquisition holds or held the lease since, 4 if
-- forcerelease.lua ended it, 5 if there is no record.
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'token', 'nonce', 'expires')
if not r[1] then
  return 5
end
if r[2] ~= ARGV[1] or r[1] ~= ARGV[2] then
  return 3
end
if r[3] == '-1' then
  return 4
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if tonumber(r[3]) <= now then
  return 2
end
redis.call('HSET', rec, 'expires', now + ARGV[3], 'renewed', now)
return 1
