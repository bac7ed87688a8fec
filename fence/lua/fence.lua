#!lua
-- fence: check and advance the fence of one resource, then apply a group of
-- allowed commands to keys in the resource's hash slot, atomically.
--
-- KEYS[1]   the fence key: a hash that is never deleted and never expires,
--           with the fields
--             key    the lease key the resource is fenced by
--             token  the highest token of that lease it accepted (decimal)
--             owner  the owner of the acquisition that wrote that token
-- KEYS[2..] the data keys the commands touch, named by their index; every
--           other key is out of reach of the script
-- ARGV[1]   lease key
-- ARGV[2]   token: decimal, 1 to 20 digits, no leading zero (any uint64)
-- ARGV[3]   owner
-- ARGV[4]   number of commands n (0 claims the resource)
-- ARGV[5..] n commands, each: name, key index (2..#KEYS), argument count c,
--           then c arguments (the key is not among them)
--
-- Returns {1, {reply of each command}} when the fence admits the token;
-- {2, fenced key, fenced token} when the fence has accepted a higher token of
-- the same lease; {3, fenced key, fenced token} when another lease fences the
-- resource. Nothing is written in the last two cases.
--
-- A command that is not allowed, or that would fail (WRONGTYPE, INCRBY on a
-- value that is not an integer or near overflow), is refused with an error
-- reply before anything is written: scripts are not rolled back, so every
-- failure is found first, by simulating the key types and integer values the
-- group sees.
--
-- Tokens are compared as decimal strings (length, then digits), never as Lua
-- numbers, so every uint64 compares exactly.

local MAX_EX = 3153600000          -- 100 years in seconds
local MAX_PX = MAX_EX * 1000
local INCR_LIMIT = 9.2e18          -- below 2^63 by far more than a double's error

local function refuse(msg)
  return redis.error_reply('ERR fence: ' .. msg)
end

-- a < b for canonical decimal strings.
local function lower(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

-- The value of a canonical decimal integer string of at most 19 digits, as
-- Valkey's INCRBY reads it; nil for anything else.
local function int(s)
  if type(s) ~= 'string' or #s > 20 then return nil end
  if s == '0' or string.match(s, '^-?[1-9]%d*$') then
    local digits = #s
    if string.sub(s, 1, 1) == '-' then digits = digits - 1 end
    if digits <= 19 then return tonumber(s) end
  end
  return nil
end

local function positive(s, max)
  local n = int(s)
  return n ~= nil and n >= 1 and n <= max
end

-- Argument checks, one per allowed command. Each returns nil when args (the
-- arguments after the key) are well formed, or what is wrong.
local shapes = {}

shapes.SET = function(a)
  if #a < 1 then return 'SET needs a value' end
  local cond, ttl = false, false
  local i = 2
  while i <= #a do
    local o = a[i]
    if o == 'NX' or o == 'XX' then
      if cond then return 'SET takes one of NX and XX' end
      cond = true
    elseif o == 'KEEPTTL' then
      if ttl then return 'SET takes one of EX, PX and KEEPTTL' end
      ttl = true
    elseif o == 'EX' or o == 'PX' then
      if ttl then return 'SET takes one of EX, PX and KEEPTTL' end
      ttl = true
      i = i + 1
      if not positive(a[i], o == 'EX' and MAX_EX or MAX_PX) then return 'SET ' .. o .. ' needs a TTL in range' end
    else
      return 'SET option ' .. tostring(o) .. ' is not allowed'
    end
    i = i + 1
  end
  return nil
end

shapes.HSET = function(a)
  if #a < 2 or #a % 2 ~= 0 then return 'HSET needs field value pairs' end
  return nil
end

shapes.DEL = function(a)
  if #a ~= 0 then return 'DEL takes one key' end
  return nil
end

shapes.INCRBY = function(a)
  if #a ~= 1 or int(a[1]) == nil then return 'INCRBY needs one integer' end
  return nil
end

shapes.EXPIRE = function(a)
  if #a ~= 1 or not positive(a[1], MAX_EX) then return 'EXPIRE needs a TTL in range' end
  return nil
end

shapes.PEXPIRE = function(a)
  if #a ~= 1 or not positive(a[1], MAX_PX) then return 'PEXPIRE needs a TTL in range' end
  return nil
end

shapes.XADD = function(a)
  local i = 1
  if a[i] == 'NOMKSTREAM' then i = i + 1 end
  if a[i] == 'MAXLEN' then
    i = i + 1
    if a[i] == '=' or a[i] == '~' then i = i + 1 end
    local n = int(a[i])
    if n == nil or n < 0 then return 'XADD MAXLEN needs a count' end
    i = i + 1
  end
  if a[i] ~= '*' then return 'XADD takes only the ID *' end
  local rest = #a - i
  if rest < 2 or rest % 2 ~= 0 then return 'XADD needs field value pairs' end
  return nil
end

-- The token.
local token = ARGV[2]
if type(token) ~= 'string' or #token > 20 or not string.match(token, '^[1-9]%d*$') then
  return refuse('bad token')
end
if type(ARGV[1]) ~= 'string' or ARGV[1] == '' or type(ARGV[3]) ~= 'string' then
  return refuse('bad lease key or owner')
end

-- The data keys: distinct, and none of them the fence key.
local seen = {[KEYS[1]] = true}
for i = 2, #KEYS do
  if seen[KEYS[i]] then return refuse('key ' .. i .. ' is the fence key or repeated') end
  seen[KEYS[i]] = true
end

-- The commands.
local n = int(ARGV[4])
if n == nil or n < 0 then return refuse('bad command count') end
local cmds = {}
local pos = 5
for c = 1, n do
  local name, ki, argc = ARGV[pos], int(ARGV[pos + 1]), int(ARGV[pos + 2])
  if shapes[name] == nil then return refuse('command ' .. c .. ': ' .. tostring(name) .. ' is not allowed') end
  if ki == nil or ki < 2 or ki > #KEYS then return refuse('command ' .. c .. ': key index out of range') end
  if argc == nil or argc < 0 or pos + 2 + argc > #ARGV then return refuse('command ' .. c .. ': bad argument count') end
  local args = {}
  for j = 1, argc do args[j] = ARGV[pos + 2 + j] end
  local bad = shapes[name](args)
  if bad then return refuse('command ' .. c .. ': ' .. bad) end
  cmds[c] = {name = name, key = ki, args = args}
  pos = pos + 3 + argc
end
if pos ~= #ARGV + 1 then return refuse('arguments left over') end

-- The fence.
local f = redis.call('HMGET', KEYS[1], 'key', 'token')
if f[1] then
  if type(f[2]) ~= 'string' or not string.match(f[2], '^[1-9]%d*$') then
    return refuse('the fence key holds no token')
  end
  if f[1] ~= ARGV[1] then return {3, f[1], f[2]} end
  if lower(token, f[2]) then return {2, f[1], f[2]} end
end

-- Simulate the group on the keys' types and integer values, so that every
-- failure is found before the first write.
-- A key's type is read (TYPE) only when a command depends on it: a plain
-- SET, DEL or EXPIRE never fails and needs none.
local state = {}
local function typed(s, ki)
  if s.t == nil then s.t = redis.call('TYPE', KEYS[ki])['ok'] end
  return s
end
for c, cmd in ipairs(cmds) do
  local s, a, name = state[cmd.key], cmd.args, cmd.name
  if s == nil then
    s = {}
    state[cmd.key] = s
  end
  local function wrongtype()
    return redis.error_reply('WRONGTYPE fence: command ' .. c .. ' (' .. name .. ') on a key holding a ' .. s.t .. '; nothing written')
  end
  if name == 'SET' then
    local nx, xx = false, false
    for i = 2, #a do
      if a[i] == 'NX' then nx = true elseif a[i] == 'XX' then xx = true end
    end
    local exists = true
    if nx or xx then exists = typed(s, cmd.key).t ~= 'none' end
    if (not nx or not exists) and (not xx or exists) then
      s.t, s.n, s.known = 'string', int(a[1]), true
    end
  elseif name == 'HSET' then
    if typed(s, cmd.key).t ~= 'none' and s.t ~= 'hash' then return wrongtype() end
    s.t, s.known = 'hash', false
  elseif name == 'DEL' then
    s.t, s.n, s.known = 'none', nil, true
  elseif name == 'INCRBY' then
    if typed(s, cmd.key).t ~= 'none' and s.t ~= 'string' then return wrongtype() end
    local v = 0
    if s.t == 'string' then
      if not s.known then
        s.n, s.known = int(redis.call('GET', KEYS[cmd.key])), true
      end
      v = s.n
    end
    if v == nil then
      return refuse('command ' .. c .. ' (INCRBY): the value is not an integer; nothing written')
    end
    local d = int(a[1])
    if math.abs(v) + math.abs(d) >= INCR_LIMIT then
      return refuse('command ' .. c .. ' (INCRBY): the result could overflow; nothing written')
    end
    s.t, s.n, s.known = 'string', v + d, true
  elseif name == 'XADD' then
    if typed(s, cmd.key).t ~= 'none' and s.t ~= 'stream' then return wrongtype() end
    if s.t == 'stream' or a[1] ~= 'NOMKSTREAM' then s.t = 'stream' end
  end
  -- EXPIRE and PEXPIRE with a positive TTL change no type and never fail.
end

-- Write: the fence first, then the commands.
if f[1] ~= ARGV[1] or f[2] ~= token then
  redis.call('HSET', KEYS[1], 'key', ARGV[1], 'token', token, 'owner', ARGV[3])
end
local replies = {}
for c, cmd in ipairs(cmds) do
  replies[c] = redis.call(cmd.name, KEYS[cmd.key], unpack(cmd.args))
end
return {1, replies}
