-- AcquireSet: grant acquisition $3 every key of $1, all or nothing, with
-- one token, or extend them if $3 holds them all; see the function
-- leases_setacquire in migrations/005_lease_groups.up.sql.
--
-- $1 keys (text[]), $2 owner, $3 nonce, $4 TTL (an interval).
-- One row: whether $3 holds the keys now, and, if it does, the token;
-- if not, the first key in byte order held by another acquisition, and
-- its holder's token, owner and remaining time (an interval).
SELECT r.r_granted, coalesce(r.r_key, ''), r.r_token, coalesce(r.r_owner, ''),
       coalesce(r.r_remaining, interval '0')
FROM public.leases_setacquire($1::text[], $2::text, $3::text, $4::interval) AS r
