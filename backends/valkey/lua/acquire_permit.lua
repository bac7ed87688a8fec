#!lua
-- acquire_permit: grant one permit of a semaphore to one acquisition. Each
-- permit is an ordinary lease record (see record.lua); the records of a
-- semaphore's permits, and its token key, share one hash slot.
--
-- KEYS[1..n]  the records of permits 0 to n-1, n the number of permits
-- KEYS[n+1]   the semaphore's token key: a hash whose field token holds the
--             highest token issued to any of its permits by this script,
--             whatever the number of permits then; given the retention as
--             its TTL at each grant
-- ARGV[1]     owner
-- ARGV[2]     nonce
-- ARGV[3]     TTL in microseconds
-- ARGV[4]     the retention in milliseconds, the token key's TTL; "0"
--             keeps it forever
--
-- Returns {slot, token} when a permit is granted or, for a nonce that
-- holds one of the n, extended; or {token, owner, remaining microseconds}
-- of the holder whose lease ends first when all n are held by others.
--
-- The token is above the last token of every one of the n permits, above
-- the token key's (which covers permits at n or above, granted when the
-- semaphore had more), and never below the clock: record_next_token.
local n = #KEYS - 1
local tokens = KEYS[n + 1]
local now = record_now()
local kept = redis.call('HMGET', tokens, 'token')[1]
local hadTokens = kept ~= false
local last = tonumber(kept) or 0
local recs, free, first, firstLeft = {}, nil, nil, nil
for i = 1, n do
  local r = record_read(KEYS[i])
  recs[i] = r
  last = math.max(last, record_token(r))
  local left = record_left(r, now)
  if left > 0 then
    if r[2] == ARGV[2] then
      -- The same acquisition asks again (a retry after an unanswered
      -- attempt): extend it and return its slot and token.
      redis.call('PERSIST', KEYS[i])
      record_extend(KEYS[i], now, now + ARGV[3])
      return {i - 1, record_token(r)}
    end
    if not first or left < firstLeft then
      first, firstLeft = r, left
    end
  elseif not free then
    free = i
  end
end
if not free then
  return {record_token(first), first[4], firstLeft}
end
-- The token key's TTL: the retention from this grant on.
local function keep()
  if ARGV[4] == '0' then
    redis.call('PERSIST', tokens)
  else
    redis.call('PEXPIRE', tokens, ARGV[4])
  end
end
local token = record_next_token(last, now)
local rec = KEYS[free]
-- PERSIST and PEXPIRE, which a user may be refused, come before the first
-- HSET (on a token key that does not exist yet they change nothing, and
-- PEXPIRE runs again once HSET created it).
redis.call('PERSIST', rec)
keep()
redis.call('HSET', tokens, 'token', token)
if not hadTokens then
  keep()
end
record_grant(rec, recs[free], token, ARGV[1], ARGV[2], now, now + ARGV[3])
return {free - 1, token}
