#!lua
-- renew: extend one acquisition of the lease recorded in the hash KEYS[1]
-- (see record.lua for its fields).
--
-- KEYS[1]  the lease record
-- ARGV[1]  nonce
-- ARGV[2]  token (decimal)
-- ARGV[3]  TTL in microseconds
--
-- Returns 1 if renewed, 2 if the acquisition expired (or was released), 3
-- if another acquisition holds or held the lease since, 4 if
-- forcerelease.lua ended it, 5 if there is no record.
local rec = KEYS[1]
local now = record_now()
local outcome = record_check(record_read(rec), ARGV[1], ARGV[2], now)
if outcome ~= 1 then
  return outcome
end
record_extend(rec, now, now + ARGV[3])
return 1
