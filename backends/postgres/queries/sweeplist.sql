-- Sweep, dry run: the page of sweep.sql, and the keys of the rows that
-- sweep.sql would remove from it, without removing or locking anything,
-- so that a role with SELECT alone can run it. The page CTE is that of
-- sweep.sql, word for word (a test checks); see there how it decides.
--
-- $1 the last key of the previous page ('' for the first page), $2 page
-- size, $3 retention (an interval).
-- One row: how many rows the page has, its last key (NULL if none), and
-- the keys that sweep.sql would remove, in key order.
WITH page AS MATERIALIZED (
    SELECT l.key, l.token, l.expires_at,
           CASE WHEN l.token = 0
                THEN coalesce(l.watched_until <= statement_timestamp() - $3::interval, true)
                WHEN l.expires_at = to_timestamp(0)
                THEN l.token <= (extract(epoch FROM statement_timestamp() - $3::interval) * 1000000)::bigint
                WHEN l.expires_at < statement_timestamp() - interval '13140000 hours'
                THEN l.expires_at + interval '17520000 hours' <= statement_timestamp() - $3::interval
                WHEN l.expires_at < statement_timestamp() - interval '4380000 hours'
                THEN l.expires_at + interval '8760000 hours' <= statement_timestamp() - $3::interval
                ELSE l.expires_at <= statement_timestamp() - $3::interval END AS ended
    FROM public.leases AS l
    WHERE l.key > $1::text
    ORDER BY l.key
    LIMIT $2::bigint
)
SELECT (SELECT count(*) FROM page),
       (SELECT p.key FROM page AS p ORDER BY p.key DESC LIMIT 1),
       ARRAY(SELECT p.key FROM page AS p WHERE p.ended ORDER BY p.key)
