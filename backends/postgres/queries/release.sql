-- Release: end acquisition ($2, $3) of key $1 if it holds the key and has
-- not expired, by setting its expiry to now. The row stays, so the key's
-- token is never reset. Token 0 identifies the acquisition by nonce alone.
-- If $4 is not empty and a waiter marked the row (watch.sql),
-- pg_notify($4, key) tells waiters, when the statement commits, that the
-- key is free. NOTIFY serialises committing transactions on a global lock,
-- so releases nobody waits for skip it.
--
-- $1 key, $2 nonce, $3 token or 0, $4 notification channel or ''.
-- One row with the outcome: 0 released, 1 expired, 2 superseded, as for
-- renew; no row: no record of the key.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t
), released AS (
    UPDATE public.leases AS l
    SET expires_at = now.t
    FROM now
    WHERE l.key = $1::text AND l.nonce = $2::text
      AND ($3::bigint = 0 OR l.token = $3::bigint)
      AND l.expires_at > now.t
    RETURNING l.key, l.watched_until
), notified AS (
    SELECT pg_notify($4::text, r.key)
    FROM released AS r, now
    WHERE $4::text <> '' AND r.watched_until > now.t
), latest AS (
    SELECT l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint) AS mine
    FROM public.leases AS l
    WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM released)
    FOR SHARE
)
SELECT 0 FROM released, (SELECT count(*) FROM notified) AS n
UNION ALL
SELECT CASE WHEN c.mine THEN 1 ELSE 2 END FROM latest AS c
