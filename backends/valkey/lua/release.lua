#!lua
-- release: end one acquisition of the lease recorded in the hash KEYS[1]
-- (see record.lua for its fields), keeping the record, and so the token,
-- for the retention, and announce the release on a shard channel.
--
-- KEYS[1]  the lease record
-- ARGV[1]  nonce
-- ARGV[2]  token (decimal), or "0" to identify the acquisition by nonce alone
-- ARGV[3]  the shard channel to announce the release on (same hash slot)
-- ARGV[4]  the retention in milliseconds, the record's TTL from now on;
--          "0" keeps the record forever
--
-- Returns 1 if released, 2 if the acquisition had already ended (expired
-- or released), 3 if another acquisition holds or held the lease since, 4
-- if forcerelease.lua ended it, 5 if there is no record.
local rec = KEYS[1]
local r = record_read(rec)
local token = ARGV[2]
if token == '0' then
  token = r[1]
end
local outcome = record_check(r, ARGV[1], token, record_now())
if outcome ~= 1 then
  return outcome
end
-- Announce first: a script that fails part-way keeps what it wrote, so a
-- user refused the channel (an ACL without &channels) must fail before the
-- writes, leaving the lease as it was, not released behind an error, and a
-- held lease's record without a TTL. PEXPIRE, which a user may be refused
-- too, comes before HSET for the same reason.
record_announce(ARGV[3], r[1])
record_keep(rec, ARGV[4])
record_close(rec)
return 1
