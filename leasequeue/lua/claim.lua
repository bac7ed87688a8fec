#!lua
-- claim: claim items of a queue, each its own lease, in one script.
--
-- KEYS[1]  the ready list, KEYS[2] the due set, KEYS[3] the ready-time
--          hash (see next.lua and enqueue.lua)
-- ARGV[1]  the name of an item's hash without the escaped ID and the
--          '/item' that end it (P{Q}:item/): every item key is in the
--          queue's hash slot, so the script may name the items it picks
-- ARGV[2]  the lease key of an item without its escaped ID
-- ARGV[3]  the owner, ARGV[4] the claim's secret (nonce), ARGV[5] the
--          claim's TTL in milliseconds
-- ARGV[6]  'next' and ARGV[7] n: claim up to n ready items, first those
--          of the due set whose time has come (expired claims, retries
--          due), then IDs popped from the ready list; or 'item' and
--          ARGV[7] an ID: claim that item if it is pending (whatever its
--          retry time) or running without a current claim
--
-- An item's hash (ARGV[1] .. escaped ID .. '/item') holds state, owner,
-- error, attempts, and its claim's nonce and exp (the claim's expiry,
-- microseconds on the server's clock); its fence (ARGV[1] .. escaped ID
-- .. '/fence', a hash in the format of package fence: key, token, owner)
-- holds the lease key and the token of its last claim. A claim's token is
-- max(previous token + 1, the server's time in microseconds), as the
-- lease backends seed theirs. Each claimed item is scored by its expiry
-- in the due set, so that it is looked at again when its claim ends.
--
-- Returns, for 'next', a flat list of ID, token, attempt, age (ms since
-- the ready time, or -1) per claimed item; for 'item', {'ok', token,
-- attempt, age}, {'held', owner, token, remaining µs}, {'state', state}
-- or {'none'}.
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
local ttl = tonumber(ARGV[5])
local function esc(s)
  return (string.gsub(s, '[%%{}/]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function fmt(n) return string.format('%d', n) end

-- take claims id if allowed: pending items when pending is set, running
-- items whose claim expired or was released. It returns the grant, or
-- nil and the hash's fields.
local function take(id, pending)
  local k = ARGV[1] .. esc(id) .. '/item'
  local fk = ARGV[1] .. esc(id) .. '/fence'
  local h = redis.call('HMGET', k, 'state', 'nonce', 'exp', 'owner')
  h[5] = redis.call('HGET', fk, 'token')
  local state, tok = h[1], tonumber(h[5] or '0') or 0
  if not state then return nil, h end
  if state == 'running' then
    if h[2] and h[2] ~= '' and tonumber(h[3] or '0') > nowus then return nil, h end
  elseif state ~= 'pending' or not pending then
    return nil, h
  end
  local token = math.max(tok + 1, nowus)
  local exp = nowus + ttl * 1000
  redis.call('HSET', fk, 'key', ARGV[2] .. esc(id), 'token', fmt(token), 'owner', ARGV[3])
  redis.call('HSET', k, 'state', 'running', 'owner', ARGV[3], 'nonce', ARGV[4], 'exp', fmt(exp))
  local attempt = redis.call('HINCRBY', k, 'attempts', 1)
  redis.call('ZADD', KEYS[2], math.ceil(exp / 1000), id)
  local age = -1
  local ready = redis.call('HGET', KEYS[3], id)
  if ready then age = math.max(0, now - tonumber(ready)) end
  return {token, attempt, age}
end

if ARGV[6] == 'item' then
  local g, h = take(ARGV[7], true)
  if g then return {'ok', g[1], g[2], g[3]} end
  if not h[1] then return {'none'} end
  if h[1] == 'running' then
    return {'held', h[4] or '', h[5] or '0', math.max(0, tonumber(h[3] or '0') - nowus)}
  end
  return {'state', h[1]}
end

local n = tonumber(ARGV[7])
local out = {}
local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, n)
for _, id in ipairs(due) do
  local g, h = take(id, true)
  if g then
    out[#out + 1] = id
    for _, v in ipairs(g) do out[#out + 1] = v end
  elseif not h[1] or h[1] == 'done' or h[1] == 'dead' then
    redis.call('ZREM', KEYS[2], id) -- finished or unknown: forget it
    redis.call('HDEL', KEYS[3], id)
  end
end
while #out < 4 * n do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  if not redis.call('ZSCORE', KEYS[2], id) then
    local g = take(id, true)
    if g then
      out[#out + 1] = id
      for _, v in ipairs(g) do out[#out + 1] = v end
    end
  end
end
return out
