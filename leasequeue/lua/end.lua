#!lua
-- end: write the end of an attempt under its claim's token.
--
-- KEYS[1]  the item's hash, KEYS[2] its fence (see claim.lua), KEYS[3]
--          the due set, KEYS[4] the dead set, KEYS[5] the ready-time hash,
--          KEYS[6] the done set
-- ARGV[1]  the item's ID, ARGV[2] the claim's token, ARGV[3] the owner,
--          ARGV[4] the end state ('done', 'pending' for a retry, 'dead'),
--          ARGV[5] the error text, ARGV[6] the retry delay in ms
--
-- Applies only if ARGV[2] (a canonical decimal) is the item's current
-- token and the item is running: then it sets the state and ends the
-- claim. A done or dead item leaves the due set and the ready-time hash,
-- records when it finished (field fin, milliseconds on the server's
-- clock) and joins the done or the dead set, scored by that time (see
-- prune.lua); a retried one is scored by its retry time, which becomes its
-- ready time. Returns
-- {'ok'}; {'implausible', largest} if the token is above the largest
-- plausible one, the server's clock in microseconds plus fence.MaxTokenLead; {'stale', token} if the item carries
-- another token; {'state', state} if it is not running; or {'none'} if
-- the item is unknown. Tokens are compared as strings, never as numbers.
if not tokens.valid(ARGV[2]) then
  return redis.error_reply('ERR leasequeue: finish: bad token')
end
local h = {redis.call('HGET', KEYS[1], 'state'), redis.call('HGET', KEYS[2], 'token')}
if not h[1] then return {'none'} end
local t = redis.call('TIME')
local largest = tokens.largest(t)
if tokens.less(largest, ARGV[2]) then return {'implausible', largest} end
if h[2] ~= ARGV[2] then return {'stale', h[2] or '0'} end
if h[1] ~= 'running' then return {'state', h[1]} end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'owner', ARGV[3], 'error', ARGV[5], 'nonce', '', 'exp', '0')
if ARGV[4] == 'pending' then
  local at = now + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], at, ARGV[1])
  redis.call('HSET', KEYS[5], ARGV[1], at)
  return {'ok'}
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], 'fin', now)
if ARGV[4] == 'dead' then
  redis.call('ZADD', KEYS[4], now, ARGV[1])
else
  redis.call('ZADD', KEYS[6], now, ARGV[1])
end
redis.call('HDEL', KEYS[5], ARGV[1])
return {'ok'}
