-- Renew: extend acquisition ($2, $3) of key $1 to $4 milliseconds from now
-- if it holds the key and has not expired on the database's clock.
--
-- $1 key, $2 nonce, $3 token (0: any token), $4 TTL in milliseconds.
-- One row with the outcome: 0 renewed, 1 expired (the row still shows this
-- acquisition), 2 superseded (the row shows another one). No row: there is
-- no record of the key, which counts as expired.
--
-- When the update refuses, the row is read FOR SHARE so that the outcome
-- comes from the latest row version, not from the statement's snapshot.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t
), renewed AS (
    UPDATE public.leases AS l
    SET expires_at = now.t + $4::bigint * interval '1 millisecond'
    FROM now
    WHERE l.key = $1::text AND l.nonce = $2::text
      AND ($3::bigint = 0 OR l.token = $3::bigint)
      AND l.expires_at > now.t
    RETURNING 0
), latest AS (
    SELECT l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint) AS mine
    FROM public.leases AS l
    WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM renewed)
    FOR SHARE
)
SELECT 0 FROM renewed
UNION ALL
SELECT CASE WHEN c.mine THEN 1 ELSE 2 END FROM latest AS c
