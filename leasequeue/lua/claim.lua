#!lua
-- claim: claim items of a queue, each its own lease, in one script.
--
-- KEYS[1]  the ready list, KEYS[2] the due set, KEYS[3] the ready-time
--          hash (see enqueue.lua and ValkeySource), KEYS[4] the done set (see
--          prune.lua)
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
-- Tokens are decimal strings, compared and added by the helpers of the
-- table tokens (valkeyplumbing.TokenScript, in front of this script), never
-- as Lua numbers, which are exact only up to 2^53. An item is claimed
-- only if its new token is plausible: at most the server's clock in
-- microseconds plus fence.MaxTokenLead (tokens.largest), that is if its
-- fence holds a token below that. Begin and the end of an attempt refuse
-- a token above it, so only a fence written before they did, or by hand,
-- can hold one (or a value that is no token): claims pass over such an
-- item and score it a TTL later in the due set, so that it never blocks
-- the items behind it.
--
-- Returns, for 'next', a flat list of ID, token (a decimal string),
-- attempt, age (ms since the ready time, or -1) per claimed item; for
-- 'item', {'ok', token, attempt, age}, {'held', owner, token, remaining
-- µs}, {'implausible', token, largest}, {'state', state} or {'none'}.
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- times: below 2^53
local now = math.floor(nowus / 1000)
local clock, largest = tokens.clock(t), tokens.largest(t)
local ttl = tonumber(ARGV[5])
local function esc(s)
  return (string.gsub(s, '[%%{}/]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function fmt(n) return string.format('%d', n) end

-- take claims id if allowed: pending items when pending is set, running
-- items whose claim expired or was released, if the new token is
-- plausible. It returns the grant; or nil, the hash's fields, and true if
-- the item could be claimed but for its fence.
local function take(id, pending)
  local k = ARGV[1] .. esc(id) .. '/item'
  local fk = ARGV[1] .. esc(id) .. '/fence'
  local h = redis.call('HMGET', k, 'state', 'nonce', 'exp', 'owner')
  h[5] = redis.call('HGET', fk, 'token')
  local state, tok = h[1], h[5] or '0'
  if not state then return nil, h end
  if state == 'running' then
    if h[2] and h[2] ~= '' and tonumber(h[3] or '0') > nowus then return nil, h end
  elseif state ~= 'pending' or not pending then
    return nil, h
  end
  if not (tok == '0' or tokens.valid(tok)) or not tokens.less(tok, largest) then
    return nil, h, true
  end
  local token = tokens.max(tokens.add(tok, '1'), clock)
  local exp = nowus + ttl * 1000
  redis.call('HSET', fk, 'key', ARGV[2] .. esc(id), 'token', token, 'owner', ARGV[3])
  redis.call('HSET', k, 'state', 'running', 'owner', ARGV[3], 'nonce', ARGV[4], 'exp', fmt(exp))
  local attempt = redis.call('HINCRBY', k, 'attempts', 1)
  redis.call('ZADD', KEYS[2], math.ceil(exp / 1000), id)
  local age = -1
  local ready = redis.call('HGET', KEYS[3], id)
  if ready then age = math.max(0, now - tonumber(ready)) end
  return {token, attempt, age}
end

if ARGV[6] == 'item' then
  local g, h, fenced = take(ARGV[7], true)
  if g then return {'ok', g[1], g[2], g[3]} end
  if not h[1] then return {'none'} end
  if fenced then return {'implausible', h[5], largest} end
  if h[1] == 'running' then
    return {'held', h[4] or '', h[5] or '0', math.max(0, tonumber(h[3] or '0') - nowus)}
  end
  return {'state', h[1]}
end

local n = tonumber(ARGV[7])
local out = {}
local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, n)
for _, id in ipairs(due) do
  local g, h, fenced = take(id, true)
  if g then
    out[#out + 1] = id
    for _, v in ipairs(g) do out[#out + 1] = v end
  elseif fenced then
    redis.call('ZADD', KEYS[2], now + ttl, id) -- look again a TTL later
  elseif not h[1] or h[1] == 'done' or h[1] == 'dead' then
    if h[1] == 'done' then
      -- Completed by CompleteWith, whose own indexing (finished.lua) was
      -- lost: index it now.
      local k = ARGV[1] .. esc(id) .. '/item'
      redis.call('HSETNX', k, 'fin', now)
      redis.call('ZADD', KEYS[4], 'NX', redis.call('HGET', k, 'fin'), id)
    end
    redis.call('ZREM', KEYS[2], id) -- finished or unknown: forget it
    redis.call('HDEL', KEYS[3], id)
  end
end
while #out < 4 * n do
  local id = redis.call('LPOP', KEYS[1])
  if not id then break end
  if not redis.call('ZSCORE', KEYS[2], id) then
    local g, _, fenced = take(id, true)
    if g then
      out[#out + 1] = id
      for _, v in ipairs(g) do out[#out + 1] = v end
    elseif fenced then
      redis.call('ZADD', KEYS[2], now + ttl, id) -- look again a TTL later
    else
      -- Finished (enqueued again) or unknown (removed by Sweep since):
      -- drop its ready time, which the second Enqueue recorded.
      redis.call('HDEL', KEYS[3], id)
    end
  end
end
return out
