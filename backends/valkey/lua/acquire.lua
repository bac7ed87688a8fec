#!lua
-- acquire: grant the lease recorded in the hash KEYS[1] to one acquisition.
--
-- KEYS[1]  the lease record: a hash with the fields
--          token    the last token issued for the key (decimal)
--          owner    the owner string of the last acquisition
--          nonce    the secret of the last acquisition
--          expires  when the last acquisition ends, in microseconds since
--                   the Unix epoch on this server's clock (0 once released,
--                   -1 once ended by forcerelease.lua)
--          acquired when the last acquisition was granted (microseconds)
--          renewed  when it was last extended (renew.lua, or this script
--                   for its nonce), microseconds; acquired until then
--          transitions  how many grants the record saw after its first
--                   (0 for the first); a record written by an older
--                   version, without the field, counts from 0
--          While the lease is held the record has no TTL, so that the
--          volatile-* maxmemory policies cannot evict it. Once the lease
--          ended the record is kept for a retention: release.lua and
--          forcerelease.lua give it that TTL, and sweep.lua removes the
--          record of a lease that expired once the retention passed.
-- ARGV[1]  owner
-- ARGV[2]  nonce
-- ARGV[3]  TTL in microseconds
--
-- Numbers are passed to HSET as Lua numbers, which the server writes as
-- exact decimal integers below 2^53 (tokens and expiry times are).
--
-- Returns the token (an integer) when the lease is granted or, for the same
-- nonce, extended; or {token, owner, remaining microseconds} of the current
-- holder when another acquisition holds the lease.
--
-- Granting or extending first removes any TTL the record carries from an
-- ended lease (PERSIST), before the first HSET: a user refused PERSIST
-- fails before anything is written.
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'token', 'nonce', 'expires', 'owner', 'transitions')
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local last = tonumber(r[1]) or 0
local expires = tonumber(r[3]) or 0
if expires > now then
  if r[2] ~= ARGV[2] then
    return {last, r[4], expires - now}
  end
  -- The same acquisition asks again (a retry after an unanswered attempt):
  -- extend it and return its token.
  redis.call('PERSIST', rec)
  redis.call('HSET', rec, 'expires', now + ARGV[3], 'renewed', now)
  return last
end
-- Never below the last token, and never below the clock, so that tokens keep
-- rising even after the record was lost (a restart without persistence, a
-- failover to a replica that missed writes).
local token = last + 1
if token < now then
  token = now
end
-- A record that existed saw a grant before this one: one more transition.
local transitions = 0
if r[1] then
  transitions = (tonumber(r[5]) or 0) + 1
end
redis.call('PERSIST', rec)
redis.call('HSET', rec, 'token', token, 'owner', ARGV[1], 'nonce', ARGV[2], 'expires', now + ARGV[3],
  'acquired', now, 'renewed', now, 'transitions', transitions)
return token
