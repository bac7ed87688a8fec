-- AcquirePermit: grant acquisition $3 one permit of the semaphore $1 among
-- $5 permits, the lowest free slot, or extend the one it holds; see the
-- function leases_permit in migrations/005_lease_groups.up.sql.
--
-- $1 semaphore key, $2 owner, $3 nonce, $4 TTL (an interval), $5 number
-- of permits (1 to 256).
-- One row: the slot (-1 if refused), whether $3 holds it now, and the
-- token, owner and remaining time (an interval) of the grant, or if
-- refused of the holder whose lease ends first.
SELECT r.r_slot, r.r_granted, r.r_token, r.r_owner, r.r_remaining
FROM public.leases_permit($1::text, $2::text, $3::text, $4::interval, $5::integer) AS r
