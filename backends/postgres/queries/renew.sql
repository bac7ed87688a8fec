-- Renew: extend acquisition ($2, $3) of key $1 to $4 from now
-- if it holds the key and has not expired on the database's clock.
--
-- $1 key, $2 nonce, $3 token (0: any token), $4 TTL (an interval).
-- One row with the outcome: 0 renewed, 1 expired (the row still shows this
-- acquisition, or there is no row), 2 superseded (the row shows another
-- one).
--
-- coalesce evaluates its second argument only if the update refused; it
-- then reads the row FOR SHARE, so that the outcome comes from the latest
-- row version, not from the statement's snapshot.
WITH renewed AS (
    UPDATE public.leases AS l
    SET expires_at = statement_timestamp() + $4::interval
    WHERE l.key = $1::text AND l.nonce = $2::text
      AND ($3::bigint = 0 OR l.token = $3::bigint)
      AND l.expires_at > statement_timestamp()
    RETURNING 0 AS outcome
)
SELECT coalesce(
    (SELECT r.outcome FROM renewed AS r),
    (SELECT CASE WHEN l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint) THEN 1 ELSE 2 END
     FROM public.leases AS l
     WHERE l.key = $1::text
     FOR SHARE),
    1)
