#!lua
-- publish: write a cache entry if, at this instant, the refresh lease still
-- shows the publishing acquisition and the entry was not invalidated since
-- that acquisition. Every key is in one hash slot (one hash tag).
--
-- KEYS[1]  the refresh lease's record, a hash kept by the Valkey lease
--          backend: token (the last token issued), owner, nonce (never read
--          here) and expires (microseconds since the Unix epoch on this
--          server's clock; 0 once released)
-- KEYS[2]  the invalidation mark: the highest lease token whose
--          acquisitions may no longer publish (missing means 0); deleted
--          here once a token above it publishes (see below)
-- KEYS[3]  the value key: a header naming the mode and the publishing
--          token, then the value (see entry.go)
-- KEYS[4]  the freshness marker: the publishing token, for mode 'S'
-- ARGV[1]  the acquisition's token (decimal)
-- ARGV[2]  the acquisition's owner
-- ARGV[3]  what the value key is to hold: header and value
-- ARGV[4]  how long the value is fresh, in milliseconds
-- ARGV[5]  how long the value is kept (fresh, then stale), in milliseconds
-- ARGV[6]  the shard channel that announces publications (same hash slot)
-- ARGV[7]  the mode: 'F' (fresh while the value key exists: it expires
--          after ARGV[4]) or 'S' (fresh while the marker holds its token:
--          the marker expires after ARGV[4], the value after ARGV[5])
--
-- A publication with a token above the mark deletes the mark, last: the
-- record shows that token, issued after the mark's, and tokens of a key
-- only rise, so no acquisition with a token up to the mark can be current
-- again, and the lease check above refuses each of them without the
-- mark. (sweep.lua deletes the marks of entries nobody publishes.)
--
-- Returns {0} when published; {1, record token, record owner, record
-- expires, now} when the lease does not show the acquisition (nothing
-- written; missing fields are nil); {2, mark} when the entry was
-- invalidated since the acquisition (nothing written).
local r = redis.call('HMGET', KEYS[1], 'token', 'owner', 'expires')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if r[1] ~= ARGV[1] or r[2] ~= ARGV[2] or (tonumber(r[3]) or 0) <= now then
  return {1, r[1], r[2], r[3], now}
end
local m = redis.call('GET', KEYS[2])
local mark = tonumber(m) or 0
if tonumber(ARGV[1]) <= mark then
  return {2, mark}
end
-- Announce before writing: a script that fails part-way keeps what it
-- wrote, so a user refused the channel must fail with nothing published.
-- Subscribers see the message only after the script has run.
redis.call('SPUBLISH', ARGV[6], ARGV[1])
if ARGV[7] == 'S' then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[5])
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
  redis.call('UNLINK', KEYS[4])
end
if m then
  redis.call('UNLINK', KEYS[2])
end
return {0}
