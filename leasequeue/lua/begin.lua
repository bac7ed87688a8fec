#!lua
-- begin: start an attempt at an item under a lease of the caller's lease
-- backend (Source.Begin; a Queue on this source claims with claim.lua).
--
-- KEYS[1]  the item's hash, KEYS[2] its fence (see claim.lua), KEYS[3]
--          the due set, KEYS[4] the ready-time hash, KEYS[5] the done set
-- ARGV[1]  the item's ID, ARGV[2] the lease key, ARGV[3] the token
--          (canonical decimal, any uint64), ARGV[4] the owner, ARGV[5]
--          how long to hide the item, in milliseconds
--
-- Refuses an unknown item ({'none'}, and forgets it in the due set and
-- ready-time hash: Sweep may have removed it since Next handed it out);
-- writing nothing, a token above the largest plausible one, the server's
-- clock in microseconds plus fence.MaxTokenLead ({'implausible',
-- largest}), which no backend can have issued yet and which, as the
-- fence, would let no claim pass it; a token below the fence's ({'stale',
-- token}) or another lease key's fence ({'foreign', key, token}); a
-- finished item ({'state', state}, and forgets it in the due set and
-- ready-time hash; a done one whose completion was not indexed, see
-- finished.lua, is indexed now). Otherwise it advances the fence to the
-- token, makes the item running under the owner without
-- a claim of its own, counts the attempt, scores the item now + hide in
-- the due set and returns {'ok', attempt, age in ms or -1}. Tokens are
-- compared with the helpers of the table tokens (valkeystore.TokenScript,
-- in front of this script): as decimal strings, so every uint64 compares
-- exactly.
local token = ARGV[3]
if not tokens.valid(token) then
  return redis.error_reply('ERR leasequeue: begin: bad token')
end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  -- Unknown, or removed by Sweep since Next handed it out: forget it.
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  return {'none'}
end
local t = redis.call('TIME')
local largest = tokens.largest(t)
if tokens.less(largest, token) then return {'implausible', largest} end
local f = redis.call('HMGET', KEYS[2], 'key', 'token')
if f[2] and not tokens.valid(f[2]) then
  return redis.error_reply('ERR leasequeue: begin: the fence of the item holds no token')
end
if f[1] and f[1] ~= ARGV[2] then return {'foreign', f[1], f[2] or '0'} end
if f[2] and tokens.less(token, f[2]) then return {'stale', f[2]} end
if state == 'done' or state == 'dead' then
  if state == 'done' then
    redis.call('HSETNX', KEYS[1], 'fin', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('ZADD', KEYS[5], 'NX', redis.call('HGET', KEYS[1], 'fin'), ARGV[1])
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  return {'state', state}
end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'key', ARGV[2], 'token', token, 'owner', ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[4], 'nonce', '', 'exp', '0')
local attempt = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[1])
local age = -1
local ready = redis.call('HGET', KEYS[4], ARGV[1])
if ready then age = math.max(0, now - tonumber(ready)) end
return {'ok', attempt, age}
