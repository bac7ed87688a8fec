#!lua
-- sweep: delete an entry's invalidation mark once it is redundant, that is
-- once no acquisition of the refresh lease with a token up to the mark can
-- pass publish.lua's lease check, now or later. Sweeper.Sweep runs it on
-- every mark its SCAN finds. Both keys are in one hash slot.
--
-- KEYS[1]  the refresh lease's record (see publish.lua)
-- KEYS[2]  the invalidation mark
-- ARGV[1]  the lease Store's retention in microseconds, or -1 for
--          lease.KeepForever
-- ARGV[2]  "1" for a dry run, which writes nothing; the dry run is this
--          script with the flag no-writes, run with EVALSHA_RO
--
-- Returns 1 if it deleted the mark (or, in a dry run, would have), 0 if
-- not.
--
-- publish.lua lets an acquisition publish only while the record shows its
-- token and owner with expires later than TIME. The mark, m, stops the
-- acquisitions with a token up to m. It is kept while the record shows
-- such a token that is still live, or that expired (no release) less than
-- the retention ago; it is deleted when
--
--   - there is no record, or no token in it: no acquisition passes the
--     check, and the next one gets a token above every earlier one
--     (acquire.lua: the clock in microseconds; it may be below m only if
--     the clock stepped back, and it began after the invalidation anyway);
--   - the record shows a token above m: tokens of a key only rise, so no
--     token up to m is shown again;
--   - the record shows a token up to m that was released (expires 0) or
--     force-released (-1): renew.lua and acquire.lua never make an ended
--     acquisition current again, and expires stays below TIME whatever
--     the clock does;
--   - the record shows a token up to m that expired without a release a
--     retention ago. An expired acquisition stays ended only while the
--     clock does not step back past its expiry; waiting the retention, as
--     the lease Store waits before removing such a record, keeps the mark
--     across a backward step of up to the retention. With
--     lease.KeepForever the mark waits for the next acquisition.
local m = tonumber(redis.call('GET', KEYS[2]))
if not m then
  return 0 -- deleted since the SCAN, or not a mark
end
local r = redis.call('HMGET', KEYS[1], 'token', 'expires')
local token = tonumber(r[1])
local expires = tonumber(r[2]) or 0
if token and token <= m and expires > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local retention = tonumber(ARGV[1])
  if expires > now or retention < 0 or expires + retention > now then
    return 0
  end
end
if ARGV[2] ~= '1' then
  redis.call('UNLINK', KEYS[2])
end
return 1
