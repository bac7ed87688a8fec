#!lua
-- fence: check and advance the fence of one resource, then apply a group of
-- allowed commands to keys in the resource's hash slot, atomically.
--
-- KEYS[1]   the fence key: a hash that never expires, with the fields
--             key    the lease key the resource is fenced by
--             token  the highest token of that lease it accepted (decimal)
--             owner  the owner of the acquisition that wrote that token
--             at     the server's clock (TIME) in microseconds when the
--                    token last advanced; absent on keys written before
--                    fences retired
--           It is deleted only by retire.lua, which raises the floor of its
--           lease key in the same script.
-- KEYS[2]   the floor key of the lease key ARGV[1] in the fence key's hash
--           slot: a hash whose field token holds the highest token of the
--           lease among the fences retired in that slot; it may not exist.
--           Its name is the prefix, '{', a tag, '}:floor:' and the lease key
--           escaped (internal/keyspace), which the script checks
-- KEYS[3..] the data keys the commands touch, named by their index; every
--           other key is out of reach of the script
-- ARGV[1]   lease key
-- ARGV[2]   token: decimal, 1 to 20 digits, no leading zero (any uint64)
-- ARGV[3]   owner
-- ARGV[4]   number of commands n (0 claims the resource)
-- ARGV[5..] n commands, each: name, key index (3..#KEYS), argument count c,
--           then c arguments (the key is not among them)
--
-- Returns {1, {reply of each command}} when the fence admits the token;
-- {2, fenced key, fenced token} when the fence has accepted a higher token of
-- the same lease; {3, fenced key, fenced token} when another lease fences the
-- resource; {4, largest token} when the token is implausible: above the
-- server's clock (TIME) in microseconds plus fence.MaxTokenLead
-- (tokens.largest), more than any lease backend can have issued yet;
-- {6, floor} when the token is below the floor of its lease key in this
-- slot, whether or not the resource has a fence. Nothing is written in
-- those four cases.
-- {5, c, error} when command c failed although the checks passed: the fence
-- and commands 1..c-1 were applied, c and the rest were not.
--
-- A command that is not allowed, or that would fail (WRONGTYPE, INCRBY on a
-- value that is not an integer or near overflow, XADD on a stream that has
-- issued its last possible ID), is refused with an error reply before
-- anything is written: scripts are not rolled back, so every failure is
-- found first, by simulating the key types, integer values and stream IDs
-- the group sees. What each allowed command can fail on, and how it is
-- found first:
--
--   SET       nothing: it replaces a value of any type; its TTL is at most
--             100 years (checked here), far from Valkey's overflow limit
--   HSET      WRONGTYPE: the key's type, read with TYPE and simulated
--   DEL       nothing
--   INCRBY    WRONGTYPE; a value Valkey does not read as an integer; a
--             result out of int64: type, value (GET) and result simulated
--   EXPIRE,   nothing: the TTL is positive and at most 100 years (checked
--   PEXPIRE   here)
--   XADD *    WRONGTYPE; a stream whose last generated ID is the largest
--             possible one (18446744073709551615-18446744073709551615, set
--             with XSETID or reached by XADD): type read with TYPE, last ID
--             with XINFO STREAM, and the IDs the group takes simulated.
--             Valkey also refuses an entry larger than 4 GiB together with
--             its stream node; a request that large exceeds the default
--             client-query-buffer-limit (1 GiB) and proto-max-bulk-len
--             (512 MiB) and never reaches the script, and a node that
--             large needs stream-node-max-bytes of gigabytes (default 4 KiB).
--
-- Time stands still while a script runs, so no key expires between the
-- checks and the writes. Under maxmemory, Valkey refuses only a script's
-- first write (here the fence), never a later one.
--
-- Tokens are compared as decimal strings (length, then digits), never as Lua
-- numbers, so every uint64 compares exactly: the helpers of the table tokens
-- (internal/valkeyplumbing/lua/tokens.lua) are in front of this script.

local MAX_EX = 3153600000          -- 100 years in seconds
local MAX_PX = MAX_EX * 1000
local INCR_LIMIT = 9.2e18          -- below 2^63 by far more than a double's error

local ARGV, KEYS = ARGV, KEYS
local byte, match, tonumber = string.byte, string.match, tonumber

local function refuse(msg)
  return redis.error_reply('ERR fence: ' .. msg)
end

-- The value of a canonical decimal integer string of at most 19 digits, as
-- Valkey's INCRBY reads it; nil for anything else.
local function int(s)
  if type(s) ~= 'string' or #s > 20 then return nil end
  if s == '0' or match(s, '^-?[1-9]%d*$') then
    local digits = #s
    if byte(s, 1) == 45 then digits = digits - 1 end -- '-'
    if digits <= 19 then return tonumber(s) end
  end
  return nil
end

-- A small count or index in ARGV (the script's own framing): a whole
-- number, compared against bounds by the caller.
local function count(s)
  local n = tonumber(s)
  if n == nil or n ~= n - n % 1 then return nil end
  return n
end

local function positive(s, max)
  local n = int(s)
  return n ~= nil and n >= 1 and n <= max
end

-- The allowed commands, and the check of each one's arguments ARGV[i..j]
-- (those after the key): nil when they are well formed, or what is wrong.
local ALLOWED = {SET = true, HSET = true, DEL = true, INCRBY = true, EXPIRE = true, PEXPIRE = true, XADD = true}
local function shape(name, i, j)
  if name == 'SET' then
    if j < i then return 'SET needs a value' end
    local cond, ttl = false, false
    local k = i + 1
    while k <= j do
      local o = ARGV[k]
      if o == 'NX' or o == 'XX' then
        if cond then return 'SET takes one of NX and XX' end
        cond = true
      elseif o == 'KEEPTTL' then
        if ttl then return 'SET takes one of EX, PX and KEEPTTL' end
        ttl = true
      elseif o == 'EX' or o == 'PX' then
        if ttl then return 'SET takes one of EX, PX and KEEPTTL' end
        ttl = true
        k = k + 1
        if k > j or not positive(ARGV[k], o == 'EX' and MAX_EX or MAX_PX) then return 'SET ' .. o .. ' needs a TTL in range' end
      else
        return 'SET option ' .. tostring(o) .. ' is not allowed'
      end
      k = k + 1
    end
  elseif name == 'HSET' then
    local n = j - i + 1
    if n < 2 or n % 2 ~= 0 then return 'HSET needs field value pairs' end
  elseif name == 'DEL' then
    if j >= i then return 'DEL takes one key' end
  elseif name == 'INCRBY' then
    if j ~= i or int(ARGV[i]) == nil then return 'INCRBY needs one integer' end
  elseif name == 'EXPIRE' then
    if j ~= i or not positive(ARGV[i], MAX_EX) then return 'EXPIRE needs a TTL in range' end
  elseif name == 'PEXPIRE' then
    if j ~= i or not positive(ARGV[i], MAX_PX) then return 'PEXPIRE needs a TTL in range' end
  elseif name == 'XADD' then
    local k = i
    if k <= j and ARGV[k] == 'NOMKSTREAM' then k = k + 1 end
    if k <= j and ARGV[k] == 'MAXLEN' then
      k = k + 1
      if k <= j and (ARGV[k] == '=' or ARGV[k] == '~') then k = k + 1 end
      local n = k <= j and int(ARGV[k])
      if not n or n < 0 then return 'XADD MAXLEN needs a count' end
      k = k + 1
    end
    if k > j or ARGV[k] ~= '*' then return 'XADD takes only the ID *' end
    local rest = j - k
    if rest < 2 or rest % 2 ~= 0 then return 'XADD needs field value pairs' end
  end
  return nil
end

-- less(a, b) reports a < b for canonical decimal strings (tokens, and
-- the parts of stream IDs).
local less = tokens.less

-- The token: canonical decimal, compared as a string.
local token = ARGV[2]
if not tokens.valid(token) then
  return refuse('bad token')
end
-- Plausible: at most the server's clock in microseconds plus
-- fence.MaxTokenLead.
local time = redis.call('TIME')
local largest = tokens.largest(time)
if less(largest, token) then return {4, largest} end
if type(ARGV[1]) ~= 'string' or ARGV[1] == '' or type(ARGV[3]) ~= 'string' then
  return refuse('bad lease key or owner')
end

-- The floor key: the prefix, '{', a tag without braces, '}:floor:' and
-- the lease key escaped as internal/keyspace escapes names.
local nkeys = #KEYS
if nkeys < 2 then return refuse('no floor key') end
local floorkey = KEYS[2]
local floors = string.sub(floorkey, 1, (string.find(floorkey, '{', 1, true)))
local escaped = (string.gsub(ARGV[1], '[%%{}/]', function(c) return string.format('%%%02X', byte(c)) end))
local fsuffix = '}:floor:' .. escaped
if floors == '' or #floorkey <= #floors + #fsuffix or string.sub(floorkey, -#fsuffix) ~= fsuffix
    or string.find(string.sub(floorkey, #floors + 1, -#fsuffix - 1), '[{}]') then
  return refuse('key 2 is not the floor key of the lease')
end

-- The data keys: distinct, and none of them a fence key, this resource's
-- or another's (a fence key is the prefix, '{', the resource, '}'; the
-- resource has no braces), nor a floor key (the prefix, '{', a tag,
-- '}:floor:', anything), so that no group can lower or remove a fence or
-- a floor.
if nkeys > 2 then
  local fk = KEYS[1]
  local fences = string.sub(fk, 1, (string.find(fk, '{', 1, true)))
  local seen = {[fk] = true, [floorkey] = true}
  for i = 3, nkeys do
    if seen[KEYS[i]] then return refuse('key ' .. i .. ' is the fence key, the floor key or repeated') end
    local k = KEYS[i]
    if #k > #fences and string.sub(k, 1, #fences) == fences and string.sub(k, -1) == '}'
        and not string.find(string.sub(k, #fences + 1, -2), '[{}]') then
      return refuse('key ' .. i .. ' is a fence key')
    end
    if #k > #floors and string.sub(k, 1, #floors) == floors then
      local close = string.find(k, '}', #floors + 1, true)
      if close and close > #floors + 1 and not string.find(string.sub(k, #floors + 1, close - 1), '{', 1, true)
          and string.sub(k, close + 1, close + 7) == ':floor:' then
        return refuse('key ' .. i .. ' is a floor key')
      end
    end
    seen[KEYS[i]] = true
  end
end

-- The commands: {name, key index, first argument, last argument}.
local nargv = #ARGV
local n = count(ARGV[4])
if n == nil or n < 0 then return refuse('bad command count') end
local cmds = {}
local pos = 5
for c = 1, n do
  local name, ki, argc = ARGV[pos], count(ARGV[pos + 1]), count(ARGV[pos + 2])
  if not ALLOWED[name] then return refuse('command ' .. c .. ': ' .. tostring(name) .. ' is not allowed') end
  if ki == nil or ki < 3 or ki > nkeys then return refuse('command ' .. c .. ': key index out of range') end
  if argc == nil or argc < 0 or pos + 2 + argc > nargv then return refuse('command ' .. c .. ': bad argument count') end
  local first, last = pos + 3, pos + 2 + argc
  local bad = shape(name, first, last)
  if bad then return refuse('command ' .. c .. ': ' .. bad) end
  cmds[c] = {name, ki, first, last}
  pos = last + 1
end
if pos ~= nargv + 1 then return refuse('arguments left over') end

-- The floor of the lease key in this slot.
local floor = redis.call('HMGET', floorkey, 'token')[1]
if floor then
  if not tokens.valid(floor) then return refuse('the floor key holds no token') end
  if less(token, floor) then return {6, floor} end
end

-- The fence.
local f = redis.call('HMGET', KEYS[1], 'key', 'token')
if f[1] then
  local cur = f[2]
  if type(cur) ~= 'string' or not match(cur, '^[1-9]%d*$') then
    return refuse('the fence key holds no token')
  end
  if f[1] ~= ARGV[1] then return {3, f[1], cur} end
  if less(token, cur) then return {2, f[1], cur} end
end

-- Simulate the group on the keys' types, integer values and stream IDs, so
-- that every failure is found before the first write. A key's type is read
-- (TYPE) only when a command depends on it: a plain SET, DEL or EXPIRE
-- never fails.
-- state[ki] = {t = type or nil if unread, v = string value if known,
--              ids = how many more IDs XADD * can issue, at least, if known}
local state = {}
local function typeof(s, ki)
  if s.t == nil then s.t = redis.call('TYPE', KEYS[ki])['ok'] end
  return s.t
end

-- How many more entries XADD * can add to the existing stream key, at
-- least: an ID is (ms, seq); the next one is (now, 0) or (ms, seq + 1),
-- carrying into ms, so IDs run out only once ms is the largest uint64, and
-- then after 2^64 - 1 - seq more. Nil if the last ID cannot be read.
local MAXU = '18446744073709551615'
local NEAR = '18446744073709000000' -- seq at or above it: count exactly
local function idsleft(key)
  local info = redis.call('XINFO', 'STREAM', key)
  local last
  for x = 1, #info - 1, 2 do
    if info[x] == 'last-generated-id' then last = info[x + 1] end
  end
  local ms, seq = match(type(last) == 'string' and last or '', '^(%d+)%-(%d+)$')
  if ms == nil then return nil end
  if ms ~= MAXU then return math.huge end
  if less(seq, NEAR) then return 551615 end -- at least MAXU - NEAR
  return 551615 - tonumber(string.sub(seq, 15))
end
local function wrongtype(c, name, t)
  return redis.error_reply('WRONGTYPE fence: command ' .. c .. ' (' .. name .. ') on a key holding a ' .. t .. '; nothing written')
end
for c = 1, n do
  local cmd = cmds[c]
  local name, ki, i, j = cmd[1], cmd[2], cmd[3], cmd[4]
  local s = state[ki]
  if s == nil then
    s = {}
    state[ki] = s
  end
  if name == 'SET' then
    local cond = nil
    for k = i + 1, j do
      if ARGV[k] == 'NX' or ARGV[k] == 'XX' then cond = ARGV[k] end
    end
    if cond == nil or (cond == 'NX') ~= (typeof(s, ki) ~= 'none') then
      s.t, s.v, s.ids = 'string', ARGV[i], nil
    end
  elseif name == 'HSET' then
    local t = typeof(s, ki)
    if t ~= 'none' and t ~= 'hash' then return wrongtype(c, name, t) end
    s.t = 'hash'
  elseif name == 'DEL' then
    s.t, s.v, s.ids = 'none', nil, nil
  elseif name == 'INCRBY' then
    local t = typeof(s, ki)
    if t ~= 'none' and t ~= 'string' then return wrongtype(c, name, t) end
    local v = 0
    if t == 'string' then
      if s.v == nil then s.v = redis.call('GET', KEYS[ki]) end
      v = int(s.v)
    end
    if v == nil then
      return refuse('command ' .. c .. ' (INCRBY): the value is not an integer; nothing written')
    end
    local d = int(ARGV[i])
    if math.abs(v) + math.abs(d) >= INCR_LIMIT then
      return refuse('command ' .. c .. ' (INCRBY): the result could overflow; nothing written')
    end
    s.t, s.v = 'string', string.format('%.0f', v + d)
  elseif name == 'XADD' then
    local t = typeof(s, ki)
    if t ~= 'none' and t ~= 'stream' then return wrongtype(c, name, t) end
    if t == 'stream' or ARGV[i] ~= 'NOMKSTREAM' then
      if t == 'none' then
        s.ids = math.huge -- a new stream
      elseif s.ids == nil then
        s.ids = idsleft(KEYS[ki])
        if s.ids == nil then
          return refuse('command ' .. c .. ' (XADD): cannot read the last ID of the stream; nothing written')
        end
      end
      if s.ids < 1 then
        return refuse('command ' .. c .. ' (XADD): the stream has issued its last possible ID; nothing written')
      end
      s.t, s.ids = 'stream', s.ids - 1
    end
  end
  -- EXPIRE and PEXPIRE with a positive TTL change no type and never fail.
end

-- Write: the fence first (unless it already holds this token), with the
-- time it advanced, then the commands. A command that fails all the same
-- (a failure the checks above do not foresee, such as an ACL user without
-- the right to run it) cannot be rolled back: the script stops and says
-- exactly what was applied, rather than raising an error that would read
-- as "nothing written".
if f[1] ~= ARGV[1] or f[2] ~= token then
  redis.call('HSET', KEYS[1], 'key', ARGV[1], 'token', token, 'owner', ARGV[3], 'at', tokens.clock(time))
end
local replies = {}
for c = 1, n do
  local cmd = cmds[c]
  local r = redis.pcall(cmd[1], KEYS[cmd[2]], unpack(ARGV, cmd[3], cmd[4]))
  if type(r) == 'table' and r.err then return {5, c, r.err} end
  replies[c] = r
end
return {1, replies}
