#!lua
-- finish: forget a finished item in the queue's sets.
--
-- KEYS[1]  the due set (see next.lua), KEYS[2] the dead set, KEYS[3] the
--          ready-time hash (see enqueue.lua)
-- ARGV[1]  the item's ID, ARGV[2] '1' if the item is dead
--
-- Removes the ID from the due set; a dead item is added to the dead set,
-- scored by the time it died (milliseconds on the server's clock). Then
-- removes the ID's ready time, last: for a user whose ACL rule predates
-- HDEL, only that fails.
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now, ARGV[1])
end
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
