#!lua
-- acquire: grant the lease recorded in the hash KEYS[1] (see record.lua
-- for its fields) to one acquisition.
--
-- KEYS[1]  the lease record
-- ARGV[1]  owner
-- ARGV[2]  nonce
-- ARGV[3]  TTL in microseconds
--
-- Returns the token (an integer) when the lease is granted or, for the same
-- nonce, extended; or {token, owner, remaining microseconds} of the current
-- holder when another acquisition holds the lease.
--
-- Granting or extending first removes any TTL the record carries from an
-- ended lease (PERSIST), before the first HSET: a user refused PERSIST
-- fails before anything is written.
local rec = KEYS[1]
local r = record_read(rec)
local now = record_now()
local last = record_token(r)
if record_left(r, now) > 0 then
  if r[2] ~= ARGV[2] then
    return {last, r[4], record_left(r, now)}
  end
  -- The same acquisition asks again (a retry after an unanswered attempt):
  -- extend it and return its token.
  redis.call('PERSIST', rec)
  record_extend(rec, now, now + ARGV[3])
  return last
end
local token = record_next_token(last, now)
redis.call('PERSIST', rec)
record_grant(rec, r, token, ARGV[1], ARGV[2], now, now + ARGV[3])
return token
