#!lua
-- forcerelease: end whichever acquisition holds the lease recorded in the
-- hash KEYS[1] (see record.lua for its fields), for an operator, keeping
-- the record, and so the token, for the retention, and announce the
-- release on a shard channel as release.lua does. It sets the expiry to
-- -1, not 0 as release.lua does, so that renew.lua and release.lua can
-- tell the ended holder that an operator ended it. It also ends a hand-off's standing
-- offer (expires -2, see handoff.lua), keeping its token: the key is then
-- free for anyone.
--
-- KEYS[1]  the lease record
-- ARGV[1]  token (decimal): end the acquisition only if it holds this
--          token; "0" ends any
-- ARGV[2]  the shard channel to announce the release on (same hash slot)
-- ARGV[3]  the retention in milliseconds, the record's TTL from now on;
--          "0" keeps the record forever
--
-- Returns {outcome, token, owner, remaining microseconds, acquired,
-- renewed, transitions}, the record as it was before: token is nil for a
-- missing record, owner nil and remaining 0 when the lease was free; the
-- last three are the record's fields (0 where it lacks them). Outcome is
-- 1 released (or a standing offer ended), 0 nothing held (ARGV[1] "0"),
-- 2 the acquisition named by ARGV[1] already ended, 3 another acquisition
-- holds or held the lease since, 4 the acquisition named by ARGV[1] was
-- already ended by a forced release, 5 there is no record.
local rec = KEYS[1]
local r = redis.call('HMGET', rec, 'token', 'owner', 'expires', 'acquired', 'renewed', 'transitions', 'offer_until')
local any = ARGV[1] == '0'
if not r[1] then
  if any then
    return {0, false, false, 0, 0, 0, 0}
  end
  return {5, false, false, 0, 0, 0, 0}
end
local acquired, renewed, transitions = tonumber(r[4]) or 0, tonumber(r[5]) or 0, tonumber(r[6]) or 0
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local left = (tonumber(r[3]) or 0) - now
local token = tonumber(r[1])
if r[3] == '-2' and (tonumber(r[7]) or 0) > now and (any or r[1] == ARGV[1]) then
  -- A hand-off's offer stands: end it, keeping the offered token, as a
  -- held lease is ended below. The owner reported is the one who handed
  -- the key off.
  redis.call('SPUBLISH', ARGV[2], r[1])
  if ARGV[3] ~= '0' then
    redis.call('PEXPIRE', rec, ARGV[3])
  end
  redis.call('HSET', rec, 'expires', '-1')
  return {1, token, false, 0, acquired, renewed, transitions}
end
if left <= 0 then
  if not any and r[1] ~= ARGV[1] then
    return {3, token, false, 0, acquired, renewed, transitions}
  end
  if any then
    return {0, token, false, 0, acquired, renewed, transitions}
  end
  if r[3] == '-1' then
    return {4, token, false, 0, acquired, renewed, transitions}
  end
  return {2, token, false, 0, acquired, renewed, transitions}
end
if not any and r[1] ~= ARGV[1] then
  return {3, token, r[2], left, acquired, renewed, transitions}
end
-- Announce first, then PEXPIRE, as release.lua does: a user refused the
-- channel or PEXPIRE fails before the writes, leaving the lease as it was.
redis.call('SPUBLISH', ARGV[2], r[1])
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', rec, ARGV[3])
end
redis.call('HSET', rec, 'expires', '-1')
return {1, token, r[2], left, acquired, renewed, transitions}
