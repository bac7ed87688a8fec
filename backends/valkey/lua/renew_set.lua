#!lua
-- renew_set: extend the leases on a set of keys (see acquire_set.lua) held
-- by one acquisition, all or none.
--
-- KEYS     the records of the set's keys, in the order of the keys
-- ARGV[1]  nonce
-- ARGV[2]  token (decimal)
-- ARGV[3]  TTL in microseconds
--
-- Returns {1, 0} if every lease was renewed; otherwise changes nothing and
-- returns {outcome, index} for the first key (1-based, in the order of
-- KEYS) that the acquisition no longer holds, with renew.lua's outcome: 2
-- expired (or released), 3 another acquisition holds or held it since, 4
-- ended by forcerelease.lua, 5 no record.
local now = record_now()
for i, rec in ipairs(KEYS) do
  local outcome = record_check(record_read(rec), ARGV[1], ARGV[2], now)
  if outcome ~= 1 then
    return {outcome, i}
  end
end
for _, rec in ipairs(KEYS) do
  record_extend(rec, now, now + ARGV[3])
end
return {1, 0}
