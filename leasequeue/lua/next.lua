#!lua
-- next: hand out up to n items of a queue that may be claimed now.
--
-- KEYS[1]  the ready list: IDs pushed by Enqueue (or by any producer with
--          RPUSH), not handed out yet
-- KEYS[2]  the due set: IDs handed out and not finished, scored by when
--          to look at them again (milliseconds on the server's clock)
-- ARGV[1]  n, ARGV[2] how long to hide the returned IDs, in milliseconds
--
-- Returns the IDs: first those of the due set whose time has come, then
-- IDs popped from the ready list, each scored now + hide in the due set.
-- An ID popped from the ready list that is in the due set already (it was
-- enqueued twice) is left to its score.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local later = now + tonumber(ARGV[2])
local out = {}
local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, n)
for _, id in ipairs(due) do
  redis.call('ZADD', KEYS[2], later, id)
  out[#out + 1] = id
end
while #out < n do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  if not redis.call('ZSCORE', KEYS[2], id) then
    redis.call('ZADD', KEYS[2], later, id)
    out[#out + 1] = id
  end
end
return out
