-- RenewSet: extend acquisition ($2, $3) on every key of $1 to $4 from now
-- if it holds them all; see the function leases_setrenew in
-- migrations/005_lease_groups.up.sql.
--
-- $1 keys (text[]), $2 nonce, $3 token (0: any token), $4 TTL (an
-- interval).
-- One row: the outcome (0 renewed, or that of the first key in byte order
-- that the acquisition no longer holds: 1 expired, 2 superseded, 3
-- force-released, 4 no row), and that key ('' when renewed).
SELECT r.r_outcome, coalesce(r.r_key, '')
FROM public.leases_setrenew($1::text[], $2::text, $3::bigint, $4::interval) AS r
