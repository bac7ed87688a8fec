#!lua flags=allow-oom
-- invalidate: delete a cache entry and make sure that no refresh whose
-- refresh lease was acquired before this script ran can publish. See
-- publish.lua for the keys; all are in one hash slot.
--
-- KEYS[1]  the refresh lease's record (only its token field is read)
-- KEYS[2]  the invalidation mark
-- KEYS[3]  the value
-- KEYS[4]  the freshness marker
--
-- Every acquisition so far has a token no greater than the record's token
-- (the last one issued), and every later one gets a greater token, so
-- raising the mark to the record's token shuts out exactly the refreshes
-- that started before this point. The mark never goes down; it is deleted
-- once redundant, when a later token publishes (publish.lua) or a sweep
-- finds no acquisition up to it that could still be current (sweep.lua).
-- It has no TTL, so no volatile-* maxmemory policy evicts it.
--
-- It may run when the server is out of memory (allow-oom): it frees more
-- than the few bytes of the mark it may write, and a change to the source
-- must be able to invalidate its entry when the cache is full.
--
-- Returns the mark.
local last = tonumber(redis.call('HGET', KEYS[1], 'token')) or 0
local mark = tonumber(redis.call('GET', KEYS[2])) or 0
if last > mark then
  mark = last
  redis.call('SET', KEYS[2], string.format('%d', mark))
end
redis.call('UNLINK', KEYS[3], KEYS[4])
return mark
