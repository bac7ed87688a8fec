-- Force release: end whichever acquisition holds key $1 (only the one
-- holding token $2, unless $2 is 0) by setting its expiry to the Unix
-- epoch (long past, as release.sql does, so that a backward step of the
-- server's clock can't bring it back), for an operator. The row stays, so the key's token is never reset. Like
-- release.sql, it notifies waiters on channel $3 (unless '') if a waiter
-- marked the row.
--
-- $1 key, $2 token or 0, $3 notification channel or ''.
-- One row (outcome, token, held, owner, remaining microseconds): the row as
-- it was before, with outcome 1 released, 0 nothing held ($2 = 0), 2 the
-- acquisition holding $2 already ended (or there is no row), 3 another
-- acquisition holds or held the key since. Token is NULL without a row.
--
-- The fallback read (f) runs only if the update refused, FOR SHARE, so the
-- outcome comes from the latest row version, not the statement's
-- snapshot. The remaining time of a released holder is read from the
-- statement's snapshot: informational.
WITH before AS (
    SELECT b.expires_at FROM public.leases AS b WHERE b.key = $1::text
), released AS (
    UPDATE public.leases AS l
    SET expires_at = to_timestamp(0)
    FROM before AS b
    WHERE l.key = $1::text AND l.expires_at > statement_timestamp()
      AND ($2::bigint = 0 OR l.token = $2::bigint)
    RETURNING l.token, l.owner,
              floor(extract(epoch FROM b.expires_at - statement_timestamp()) * 1000000)::bigint AS left_us,
              coalesce(l.watched_until > statement_timestamp(), false) AS watched
), announced AS (
    SELECT r.token, r.owner, r.left_us,
           CASE WHEN r.watched AND $3::text <> ''
                THEN (SELECT 1 FROM pg_notify($3::text, $1::text)) ELSE 0 END AS notified
    FROM released AS r
)
SELECT coalesce(CASE WHEN r.token IS NOT NULL THEN 1 END,
                CASE WHEN $2::bigint = 0 THEN 0
                     WHEN f.token IS NOT NULL AND f.token <> $2::bigint THEN 3
                     ELSE 2 END),
       coalesce(r.token, f.token),
       r.token IS NOT NULL OR coalesce(f.held, false),
       coalesce(r.owner, f.owner, ''),
       CASE WHEN r.token IS NOT NULL THEN r.left_us
            WHEN f.held THEN f.left_us ELSE 0 END
FROM (SELECT 1) AS one
LEFT JOIN announced AS r ON true
LEFT JOIN LATERAL (
    SELECT l.token, l.expires_at > statement_timestamp() AS held, l.owner,
           floor(extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::bigint AS left_us
    FROM public.leases AS l
    WHERE l.key = $1::text AND NOT EXISTS (SELECT FROM released)
    FOR SHARE
) AS f ON true
