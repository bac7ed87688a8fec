-- record: the lease record and what every script that grants, extends or
-- ends a lease does to it. scripts.go puts this header and the helpers
-- below that a script calls at the top of acquire.lua, renew.lua,
-- release.lua, handoff.lua and the scripts of semaphores and sets (acquire_permit.lua,
-- acquire_set.lua, renew_set.lua, release_set.lua), after their first
-- line, so that they keep one record format and one token rule. Each
-- helper is a "local function record_NAME" ending at the first line "end"
-- after it, with its comment above it: the server creates every function
-- a script defines anew at each call, so a script gets only the helpers
-- it calls.
--
-- A lease record is a hash with the fields
--   token    the last token issued for the key (decimal)
--   owner    the owner string of the last acquisition
--   nonce    the secret of the last acquisition
--   expires  when the last acquisition ends, in microseconds since the Unix
--            epoch on this server's clock (0 once released, -1 once ended
--            by forcerelease.lua, -2 once handed off by handoff.lua)
--   acquired when the last acquisition was granted (microseconds)
--   renewed  when it was last extended (renew.lua, renew_set.lua, or a
--            script that grants, again for its nonce), microseconds;
--            acquired until then
--   transitions  how many grants the record saw after its first (0 for
--            the first); a record written by an older version, without
--            the field, counts from 0
--   offer    the owner strings a hand-off offered the key to, joined by
--            "\n" (owner strings hold no control character); meaningful
--            only while expires is -2: token is then the offered token, and
--            owner and nonce are still those of the acquisition that handed
--            the key off, so that renew.lua and release.lua tell it so
--   offer_until  when the offer lapses (microseconds); while it has not,
--            only an owner of offer is granted the key, with the token
--            itself; after it, anyone, with the next token
--   pref     the owner string of the preferred candidate, recorded by
--            acquire.lua for an Acquire with Preferred that found the key
--            held by another acquisition; meaningful while pref_until is
--            in the future
--   pref_until  when the preference lapses (microseconds); 0 once the
--            preferred owner was granted the key
-- The last four are written only by hand-offs and preferred candidates; a
-- grant leaves an old offer in place, ended by its expires.
-- While the lease is held the record has no TTL, so that the volatile-*
-- maxmemory policies cannot evict it. Once the lease ended the record is
-- kept for a retention: release.lua, release_set.lua and forcerelease.lua
-- give it that TTL, handoff.lua the offer's window plus the retention, and
-- sweep.lua removes the record of a lease that expired once the retention
-- passed.
--
-- Every script that ends a lease or grants one announces it on the
-- record's shard channel (in its hash slot, named by the Store): a
-- release, a forced release and a hand-off, which free the key, publish
-- the token in decimal, as every version did; a grant to a new
-- acquisition publishes "acquired", a newly recorded preferred candidate
-- "preferred". Release waiters wake only for the former, change watchers
-- for all.
--
-- Numbers are passed to HSET as Lua numbers, which the server writes as
-- exact decimal integers below 2^53 (tokens and expiry times are).
--
-- A script that fails part-way keeps what it wrote, and the Store reports
-- a refused script as not applied: so every script runs the commands a
-- user may be refused (PERSIST, SPUBLISH, PEXPIRE) before its first HSET.

-- record_now() returns the server's clock in microseconds since the Unix
-- epoch.
local function record_now()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- record_read(rec, ...) returns the fields token, nonce, expires, owner and
-- transitions of the record rec, in that order, then the fields named by
-- its further arguments (false for a missing one), in one HMGET.
local function record_read(rec, ...)
  return redis.call('HMGET', rec, 'token', 'nonce', 'expires', 'owner', 'transitions', ...)
end

-- record_token(r) returns the last token of a record read by record_read,
-- 0 if there is none.
local function record_token(r)
  return tonumber(r[1]) or 0
end

-- record_left(r, now) returns how long the lease of a record read by
-- record_read is still held at now, in microseconds: 0 or less if it is
-- free.
local function record_left(r, now)
  return (tonumber(r[3]) or 0) - now
end

-- record_next_token(last, now) returns the token of a new grant after the
-- token last: never below last + 1, and never below the clock, so that
-- tokens keep rising even after the record was lost (a restart without
-- persistence, a failover to a replica that missed writes) or removed
-- after its retention.
local function record_next_token(last, now)
  local token = last + 1
  if token < now then
    token = now
  end
  return token
end

-- record_grant(rec, r, token, owner, nonce, now, expires, ...) records a
-- new grant at now in rec, whose fields record_read returned as r, and
-- the further fields and values it is given, in one HSET. The caller ran
-- PERSIST on rec first: granting removes any TTL the record carries from
-- an ended lease.
local function record_grant(rec, r, token, owner, nonce, now, expires, ...)
  -- A record that existed saw a grant before this one: one more transition.
  local transitions = 0
  if r[1] then
    transitions = (tonumber(r[5]) or 0) + 1
  end
  redis.call('HSET', rec, 'token', token, 'owner', owner, 'nonce', nonce, 'expires', expires,
    'acquired', now, 'renewed', now, 'transitions', transitions, ...)
end

-- record_extend(rec, now, expires) extends the lease held in rec to
-- expires, renewed at now.
local function record_extend(rec, now, expires)
  redis.call('HSET', rec, 'expires', expires, 'renewed', now)
end

-- record_check(r, nonce, token, now) says what the record r, read by
-- record_read, holds for the acquisition (nonce, token): 1 if it holds the
-- lease now, 2 if it expired (or was released), 3 if another acquisition
-- holds or held the lease since, 4 if forcerelease.lua ended it, 5 if
-- there is no record, 6 if it handed the lease off (handoff.lua) and
-- nobody acquired it since: the record then has the offered token, but
-- still the nonce, which no other acquisition has.
local function record_check(r, nonce, token, now)
  if not r[1] then
    return 5
  end
  if r[3] == '-2' and r[2] == nonce then
    return 6
  end
  if r[2] ~= nonce or r[1] ~= token then
    return 3
  end
  if r[3] == '-1' then
    return 4
  end
  if tonumber(r[3]) <= now then
    return 2
  end
  return 1
end

-- record_announce(channel, token) announces on the shard channel of a
-- record (in its hash slot) that the lease with token is free.
local function record_announce(channel, token)
  redis.call('SPUBLISH', channel, token)
end

-- record_changed(channel, what) announces on the shard channel of a
-- record a change that leaves the key taken: what is "acquired" or
-- "preferred". Release waiters ignore it; change watchers do not.
local function record_changed(channel, what)
  redis.call('SPUBLISH', channel, what)
end

-- record_keep(rec, retention) gives the record of an ended lease the
-- retention (milliseconds, a string) as its TTL; "0" keeps it forever.
local function record_keep(rec, retention)
  if retention ~= '0' then
    redis.call('PEXPIRE', rec, retention)
  end
end

-- record_close(rec) marks the lease of rec released.
local function record_close(rec)
  redis.call('HSET', rec, 'expires', '0')
end

