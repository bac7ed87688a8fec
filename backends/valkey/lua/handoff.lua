#!lua
-- handoff: end one acquisition of the lease recorded in the hash KEYS[1]
-- (see record.lua for its fields) and, in the same step, offer the key to
-- candidates for a window with a new token: the record keeps the ended
-- acquisition's owner and nonce (so that renew.lua and release.lua tell
-- it that it handed the lease off), takes the new token and expires -2,
-- and the offer. The key is free but for the candidates until the window
-- passes. The hand-off is announced as a release is, so that waiting
-- candidates wake at once; the record is given the window plus the
-- retention as its TTL.
--
-- KEYS[1]  the lease record
-- ARGV[1]  nonce
-- ARGV[2]  token (decimal)
-- ARGV[3]  the candidates' owner strings joined by "\n"
-- ARGV[4]  the window in microseconds (whole milliseconds)
-- ARGV[5]  the record's shard channel (same hash slot)
-- ARGV[6]  the retention in milliseconds; "0" keeps the record forever
--
-- Returns {1, new token} if handed off; otherwise {outcome, 0} with
-- renew.lua's outcome (2 expired or released, 3 another acquisition holds
-- or held the lease since, 4 ended by forcerelease.lua, 5 no record, 6
-- already handed off), changing nothing.
local rec = KEYS[1]
local r = record_read(rec)
local now = record_now()
local outcome = record_check(r, ARGV[1], ARGV[2], now)
if outcome ~= 1 then
  return {outcome, 0}
end
local token = record_next_token(record_token(r), now)
-- Announce first, then PEXPIRE, then HSET, as release.lua does: a user
-- refused the channel or PEXPIRE fails before the writes.
record_announce(ARGV[5], token)
record_keep(rec, ARGV[6] == '0' and '0' or (ARGV[6] + ARGV[4] / 1000))
redis.call('HSET', rec, 'token', token, 'expires', -2, 'offer', ARGV[3], 'offer_until', now + ARGV[4])
return {1, token}
