#!lua flags=no-writes
-- inspect: read the claim of an item.
--
-- KEYS[1]  the item's hash, KEYS[2] its fence (see claim.lua)
--
-- Returns {token, 1, owner, remaining µs} while the item is running under
-- a claim that has not expired on the server's clock, {token, 0}
-- otherwise (token '0' if the item never had one).
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HMGET', KEYS[1], 'state', 'nonce', 'exp', 'owner')
h[5] = redis.call('HGET', KEYS[2], 'token')
local left = tonumber(h[3] or '0') - nowus
if h[1] == 'running' and h[2] and h[2] ~= '' and left > 0 then
  return {h[5] or '0', 1, h[4] or '', left}
end
return {h[5] or '0', 0}
