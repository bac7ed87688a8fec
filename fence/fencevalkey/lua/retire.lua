-- retire: retire one fence key that has not advanced for the retention,
-- raising the floor of its lease key in its hash slot, atomically.
--
-- KEYS[1]  the fence key (see fence.lua)
-- KEYS[2]  the floor key of the lease key ARGV[1] in the fence key's slot
--          (see fence.lua); the script checks its name
-- ARGV[1]  the lease key the caller read from the fence key
-- ARGV[2]  the retention in microseconds (decimal)
-- ARGV[3]  '1' for a dry run, which writes nothing
--
-- Returns 1 when the fence is (or, in a dry run, would be) retired: its
-- token last advanced at least the retention ago on the server's clock
-- (at + retention <= now, TIME). The floor key's token becomes the
-- greater of itself and the fence's token, and the fence key is deleted,
-- in this one script: no fenced write runs in between, and a fenced write
-- after it finds the floor. Returns 0 and writes nothing when the fence
-- key is gone, is fenced by another lease key than ARGV[1] (retired and
-- fenced again since the caller read it), or is younger than the
-- retention. A fence key without the field at (written before fences
-- retired) gets at = now, which starts its clock, and 0 is returned.
--
-- Tokens and times are compared as decimal strings (tokens.lua).

local function refuse(msg)
  return redis.error_reply('ERR fence retire: ' .. msg)
end

local key, retention, dry = ARGV[1], ARGV[2], ARGV[3] == '1'
if type(key) ~= 'string' or key == '' or not tokens.valid(retention) then
  return refuse('bad lease key or retention')
end
local floorkey = KEYS[2]
local floors = string.sub(floorkey, 1, (string.find(floorkey, '{', 1, true)))
local escaped = (string.gsub(key, '[%%{}/]', function(c) return string.format('%%%02X', string.byte(c)) end))
local fsuffix = '}:floor:' .. escaped
if floors == '' or #floorkey <= #floors + #fsuffix or string.sub(floorkey, -#fsuffix) ~= fsuffix
    or string.find(string.sub(floorkey, #floors + 1, -#fsuffix - 1), '[{}]') then
  return refuse('key 2 is not the floor key of the lease')
end

local f = redis.call('HMGET', KEYS[1], 'key', 'token', 'at')
if f[1] ~= key then return 0 end
if not tokens.valid(f[2]) then return refuse('the fence key holds no token') end
local now = tokens.clock(redis.call('TIME'))
if not tokens.valid(f[3]) then
  if not dry then redis.call('HSET', KEYS[1], 'at', now) end
  return 0
end
if tokens.less(now, tokens.add(f[3], retention)) then return 0 end
if dry then return 1 end

local floor = redis.call('HMGET', floorkey, 'token')[1]
if floor and not tokens.valid(floor) then return refuse('the floor key holds no token') end
if not floor or tokens.less(floor, f[2]) then
  redis.call('HSET', floorkey, 'token', f[2], 'at', now)
end
redis.call('DEL', KEYS[1])
return 1
