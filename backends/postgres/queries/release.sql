-- Release: end acquisition ($2, $3) of key $1 if it holds the key and has
-- not expired, by setting its expiry to the Unix epoch: long past, so that
-- a backward step of the server's clock can't bring the released lease
-- back (an expiry of "now" would be in the future again after the step).
-- The row stays, so the key's token is never reset. Token 0 identifies the
-- acquisition by nonce alone.
--
-- If $4 is not empty and a waiter marked the row (watch.sql), the release
-- also calls pg_notify($4, key), so that waiters learn when it commits
-- that the key is free. NOTIFY makes committing transactions queue on a
-- global lock, so releases that nobody waits for skip it.
--
-- $1 key, $2 nonce, $3 token or 0, $4 notification channel or ''.
-- One row with the outcome: 0 released, 1 expired (the row still shows
-- this acquisition, or there is no row), 2 superseded (the row shows
-- another one).
--
-- coalesce evaluates its second argument only if the update refused; it
-- then reads the row FOR SHARE, so that the outcome comes from the latest
-- row version, not from the statement's snapshot. The update's RETURNING
-- calls pg_notify for the row it released: computing RETURNING is what
-- the main query's read of "released" makes happen, and a direct call
-- costs less than a sub-select FROM pg_notify().
WITH released AS (
    UPDATE public.leases AS l
    SET expires_at = to_timestamp(0)
    WHERE l.key = $1::text AND l.nonce = $2::text
      AND ($3::bigint = 0 OR l.token = $3::bigint)
      AND l.expires_at > statement_timestamp()
    RETURNING CASE WHEN l.watched_until > statement_timestamp() AND $4::text <> ''
                   THEN pg_notify($4::text, $1::text) END
)
SELECT coalesce(
    (SELECT 0 FROM released),
    (SELECT CASE WHEN l.nonce = $2::text AND ($3::bigint = 0 OR l.token = $3::bigint) THEN 1 ELSE 2 END
     FROM public.leases AS l
     WHERE l.key = $1::text
     FOR SHARE),
    1)
