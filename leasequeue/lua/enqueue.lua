#!lua
-- enqueue: push items to a queue's ready list.
--
-- KEYS[1]  the ready list: IDs not handed out yet
-- KEYS[2]  the ready-time hash: unfinished IDs, each with the time it
--          became ready (milliseconds on the server's clock)
-- ARGV     the IDs
--
-- Records now as the ready time of each ID that has none (an ID enqueued
-- again keeps its own), and pushes the IDs in order (one by one: unpack
-- has a limit). Returns the list's length.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for _, id in ipairs(ARGV) do
  redis.call('HSETNX', KEYS[2], id, now)
  n = redis.call('RPUSH', KEYS[1], id)
end
return n
