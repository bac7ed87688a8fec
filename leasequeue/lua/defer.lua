#!lua
-- defer: look at a handed-out item again after a while.
--
-- KEYS[1]  the due set (see next.lua)
-- KEYS[2]  the ready-time hash (see enqueue.lua)
-- ARGV[1]  the item's ID, ARGV[2] the delay in milliseconds, ARGV[3] the
--          mode:
--          'XX'     score only an ID that is in the due set (a finished
--                   item is not, and stays out)
--          'RETRY'  as 'XX', and record now + delay as the ID's ready
--                   time (a failed attempt's retry)
--          'BEGIN'  add the ID too (an item that Begin found before Next
--                   did: it is handed out now), and return the item's
--                   age: milliseconds since its ready time, or -1 if it
--                   has none
--
-- Scores the ID now + delay on the server's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = now + tonumber(ARGV[2])
if ARGV[3] == 'BEGIN' then
  redis.call('ZADD', KEYS[1], at, ARGV[1])
  local ready = redis.call('HGET', KEYS[2], ARGV[1])
  if not ready then return -1 end
  return math.max(0, now - tonumber(ready))
end
local n = redis.call('ZADD', KEYS[1], 'XX', at, ARGV[1])
if ARGV[3] == 'RETRY' then
  redis.call('HSET', KEYS[2], ARGV[1], at)
end
return n
