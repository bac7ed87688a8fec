#!lua
-- release_set: end one acquisition's leases on a set of keys (see
-- acquire_set.lua), each as release.lua ends one: every key it still
-- holds is released, keeping its record for the retention, and announced
-- on the record's shard channel.
--
-- KEYS        the records of the set's keys, in the order of the keys
-- ARGV[1]     nonce
-- ARGV[2]     token (decimal), or "0" to identify the acquisition by nonce
--             alone
-- ARGV[3]     the retention in milliseconds, the records' TTL from now on;
--             "0" keeps them forever
-- ARGV[3+i]   the shard channel of KEYS[i] (same hash slot)
--
-- Returns {1, 0} if the acquisition held every key; otherwise {outcome,
-- index} for the first key (1-based) it no longer held, with release.lua's
-- outcome (2 expired or released, 3 another acquisition holds or held it
-- since, 4 ended by forcerelease.lua, 5 no record), after releasing the
-- others.
local now = record_now()
local held, lost = {}, nil
for i, rec in ipairs(KEYS) do
  local r = record_read(rec)
  local token = ARGV[2]
  if token == '0' then
    token = r[1]
  end
  local outcome = record_check(r, ARGV[1], token, now)
  if outcome == 1 then
    held[#held + 1] = {i, r[1]}
  elseif not lost then
    lost = {outcome, i}
  end
end
-- Announce all first, then PEXPIRE, then HSET, as release.lua does: a user
-- refused the channel or PEXPIRE fails before the writes.
for _, h in ipairs(held) do
  record_announce(ARGV[3 + h[1]], h[2])
end
for _, h in ipairs(held) do
  record_keep(KEYS[h[1]], ARGV[3])
end
for _, h in ipairs(held) do
  record_close(KEYS[h[1]])
end
return lost or {1, 0}
