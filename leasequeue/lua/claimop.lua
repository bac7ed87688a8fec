#!lua
-- claimop: renew or release the current claim of an item.
--
-- KEYS[1]  the item's hash, KEYS[2] its fence (see claim.lua), KEYS[3]
--          the due set
-- ARGV[1]  the item's ID, ARGV[2] the claim's token ('0': any token of
--          the secret), ARGV[3] the claim's secret, ARGV[4] 'renew' or
--          'release', ARGV[5] the TTL in milliseconds (renew)
--
-- Applies only while the item is running under that claim and the claim
-- has not expired on the server's clock. Renew moves the expiry to now +
-- TTL; release ends the claim now (the item stays running, its attempt
-- counted, claimable at once). Both score the item by the new expiry in
-- the due set. Returns {1} when applied, {0, the item's token} otherwise.
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HMGET', KEYS[1], 'state', 'nonce', 'exp')
h[4] = redis.call('HGET', KEYS[2], 'token')
if h[1] ~= 'running' or not h[2] or h[2] == '' or h[2] ~= ARGV[3]
  or (ARGV[2] ~= '0' and h[4] ~= ARGV[2]) or tonumber(h[3] or '0') <= nowus then
  return {0, h[4] or '0'}
end
local exp = nowus
if ARGV[4] == 'renew' then
  exp = nowus + tonumber(ARGV[5]) * 1000
  redis.call('HSET', KEYS[1], 'exp', string.format('%d', exp))
else
  redis.call('HSET', KEYS[1], 'nonce', '', 'exp', string.format('%d', exp))
end
redis.call('ZADD', KEYS[3], math.ceil(exp / 1000), ARGV[1])
return {1}
