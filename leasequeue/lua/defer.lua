#!lua
-- defer: look at a handed-out item again after a while.
--
-- KEYS[1]  the due set (see next.lua)
-- KEYS[2]  the ready-time hash (see enqueue.lua), unused
-- ARGV[1]  the item's ID, ARGV[2] the delay in milliseconds, ARGV[3]
--          'XX': score only an ID that is in the due set (a finished item
--          is not, and stays out)
--
-- Scores the ID now + delay on the server's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
