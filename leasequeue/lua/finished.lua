#!lua
-- finished: index an item that a fenced script of package fence marked
-- done (ValkeySource.CompleteWith), and forget it in the due set and the
-- ready-time hash.
--
-- KEYS[1]  the item's hash, KEYS[2] the due set, KEYS[3] the ready-time
--          hash, KEYS[4] the done set (see prune.lua)
-- ARGV[1]  the item's ID
--
-- If the item is done, records now (milliseconds on the server's clock)
-- as when it finished unless it has a time already, and scores it by that
-- time in the done set unless it is there already.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HGET', KEYS[1], 'state') == 'done' then
  redis.call('HSETNX', KEYS[1], 'fin', now)
  redis.call('ZADD', KEYS[4], 'NX', redis.call('HGET', KEYS[1], 'fin'), ARGV[1])
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
