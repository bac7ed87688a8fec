#!lua
-- prune: remove, or only list, the finished items of a queue that
-- outlived their retention (ValkeySource.Sweep).
--
-- KEYS[1]  the index of the state: the done set or the dead set, the IDs
--          of the items in that state scored by when they finished
--          (milliseconds on the server's clock)
-- KEYS[2]  the due set, KEYS[3] the ready-time hash (see claim.lua)
-- ARGV[1]  the name of an item's hash without the escaped ID and the
--          '/item' that end it (P{Q}:item/, see claim.lua)
-- ARGV[2]  the state ('done' or 'dead'), ARGV[3] its retention in
--          milliseconds (at least 1), ARGV[4] the offset and ARGV[5] the
--          number of IDs to visit, ARGV[6] '1' to write nothing
--
-- Visits the IDs of the index scored at least the retention ago, from the
-- offset on. An item is removed if it is in the state, finished at least
-- the retention ago (its field fin, or its score for an item finished by
-- an older release), and its token is below the server's clock in
-- microseconds, so that a claim of an item enqueued again under its ID,
-- whose token is at least the clock (claim.lua), gets a token above every
-- token the item had. Removing deletes the item's hash and fence, and its
-- entries in the index, the due set and the ready-time hash. The fence of
-- an item completed with commands (field with, see
-- ValkeySource.CompleteWith) is kept: it also guards the keys of those
-- commands, which a stale claim's CompleteWith could otherwise write.
--
-- The other IDs visited leave the range too, so that the next page does
-- not visit them again: an ID whose item is not in the state (or is
-- unknown) leaves the index; an item that finished later than its score
-- says is scored by when it finished; an item whose token is not below
-- the clock yet is scored now, and looked at again a retention later.
--
-- Returns {visited, removed ID, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local clock = tokens.clock(t)
local cutoff = now - tonumber(ARGV[3])
local dry = ARGV[6] == '1'
local function esc(s)
  return (string.gsub(s, '[%%{}/]', function(c) return string.format('%%%02X', string.byte(c)) end))
end

local page = redis.call('ZRANGE', KEYS[1], '-inf', cutoff, 'BYSCORE', 'LIMIT', tonumber(ARGV[4]), tonumber(ARGV[5]), 'WITHSCORES')
local out = {0}
for i = 1, #page, 2 do
  local id, score = page[i], tonumber(page[i + 1])
  out[1] = out[1] + 1
  local k = ARGV[1] .. esc(id) .. '/item'
  local fk = ARGV[1] .. esc(id) .. '/fence'
  local h = redis.call('HMGET', k, 'state', 'fin', 'with')
  local tok = redis.call('HGET', fk, 'token')
  local fin = tonumber(h[2] or '') or score
  if h[1] ~= ARGV[2] then
    if not dry then redis.call('ZREM', KEYS[1], id) end
  elseif fin > cutoff then
    if not dry then redis.call('ZADD', KEYS[1], fin, id) end
  elseif tok and not (tokens.valid(tok) and tokens.less(tok, clock)) then
    if not dry then redis.call('ZADD', KEYS[1], now, id) end
  else
    out[#out + 1] = id
    if not dry then
      redis.call('DEL', k)
      if not h[3] then redis.call('DEL', fk) end
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZREM', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
    end
  end
end
return out
