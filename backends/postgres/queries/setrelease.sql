-- ReleaseSet: end acquisition ($2, $3) on every key of $1 that it still
-- holds, notifying channel $4 (unless '') of each released key that a
-- waiter marked; see the function leases_setrelease in
-- migrations/005_lease_groups.up.sql.
--
-- $1 keys (text[]), $2 nonce, $3 token (0: by nonce alone), $4
-- notification channel or ''.
-- One row: the outcome (0 if it held every key, or else that of the first
-- key in byte order that it no longer held: 1 expired, 2 superseded, 3
-- force-released, 4 no row), and that key ('' when 0).
SELECT r.r_outcome, coalesce(r.r_key, '')
FROM public.leases_setrelease($1::text[], $2::text, $3::bigint, $4::text) AS r
