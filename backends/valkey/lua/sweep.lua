#!lua
-- sweep: remove the record of a lease (see record.lua for its fields) if
-- the lease expired more than a retention ago, on this server's clock.
-- Store.Sweep runs it on every record its SCAN finds.
--
-- KEYS[1]  the lease record
-- ARGV[1]  the retention in milliseconds (positive)
-- ARGV[2]  "1" for a dry run, which writes nothing; the dry run is this
--          script with the flag no-writes, run with EVALSHA_RO
--
-- Returns 1 if it removed the record (or, in a dry run, would have), 0 if
-- not.
--
-- A live record (expires in the future) is never touched, nor a hash
-- without a token field, which is not a lease record. The record of a
-- lease that expired (its holder stopped renewing and never released) has
-- no TTL, as nothing ran when the lease ended: it is removed once expires
-- plus the retention has passed, whatever TTL it may carry. A released or
-- force-released record (expires 0 or -1) got the retention as its TTL
-- from release.lua or forcerelease.lua; one without a TTL was released by
-- a version of this library that kept records forever, and gets the
-- retention as its TTL now (NX: a TTL it has is kept). Either way it ends
-- by itself and is not counted as removed. So does a handed-off record
-- (expires -2), standing offer or lapsed: handoff.lua gave it the offer's
-- window plus the retention as its TTL.
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'token', 'expires')
if not r[1] then
  return 0
end
local expires = tonumber(r[2]) or 0
local retention = tonumber(ARGV[1]) * 1000
local dry = ARGV[2] == '1'
if expires <= 0 then
  if not dry then
    redis.call('PEXPIRE', rec, ARGV[1], 'NX')
  end
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if expires + retention > now then
  return 0
end
if not dry then
  redis.call('DEL', rec)
end
return 1
