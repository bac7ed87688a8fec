#!lua
-- defer: look at a handed-out item again after a while.
--
-- KEYS[1]  the due set (see next.lua)
-- ARGV[1]  the item's ID, ARGV[2] the delay in milliseconds, ARGV[3] 'XX'
--          to score only an ID that is in the due set (a finished item is
--          not, and stays out), anything else to add it too (an item that Begin
--          found before Next did: it is handed out now)
--
-- Scores the ID now + delay on the server's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'XX' then
  return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
