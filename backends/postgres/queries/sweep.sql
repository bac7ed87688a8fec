-- Sweep: one page of the lease table, the rows whose key comes after $1
-- in key order, at most $2 of them; remove those whose lease ended at
-- least the retention $3 ago on the database's clock. sweeplist.sql, the
-- dry run, lists them instead.
--
-- $1 the last key of the previous page ('' for the first page), $2 page
-- size, $3 retention (an interval).
-- One row: how many rows the page has, its last key (NULL if none), and
-- the keys removed, in key order.
--
-- When a lease ended is read from its expiry (see release.sql and
-- forcerelease.sql):
--
--   - more than 1500 years before now: a forced release, two thousand
--     years before it happened;
--   - between 500 and 1500 years before now: a release, a thousand years
--     before it happened;
--   - the Unix epoch: a forced release (or, earlier still, a release) by a
--     previous version, which did not record when. The token, issued when
--     the lease began, is the time used instead: the lease ended later, so
--     the row may go earlier than a retention after its end, but never
--     before its token is a retention old, which is what keeps the key's
--     next token above it (tokens are seeded from the clock);
--   - otherwise the expiry itself: the lease expired then, or is live.
--
--   - a placeholder of watch.sql (token 0, holding nothing): when its
--     mark lapsed.
--
-- The bands are 500 years wide, so a backward step of the clock cannot move
-- a row from one to another. A live lease's expiry is after now, so its row
-- is never removed.
--
-- The walk follows the primary key's index. expires_at has no index on
-- purpose: acquire, renew and release update it, and an index on it would
-- end their HOT updates.
--
-- The statement never waits for a row lock. The page is read from the
-- statement's snapshot, which decides which rows have ended. Those rows are then locked FOR UPDATE SKIP LOCKED:
-- a row locked by someone else (an acquire in progress, a transaction
-- holding CheckGuard's FOR SHARE) is skipped, left for a later sweep. A row
-- that changed after the snapshot is locked in its latest version, and at
-- READ COMMITTED PostgreSQL evaluates the condition again on that version:
-- it is removed only if it still has the token and expiry it was judged by,
-- which decide the verdict (now and the retention are the same for the
-- whole statement). So a key acquired again meanwhile keeps its row. At
-- REPEATABLE READ or SERIALIZABLE that row fails the statement with a
-- serialization failure instead, which is why Store.Sweep runs it in a
-- READ COMMITTED transaction of its own where it can. Rows locked here are
-- deleted by the same statement: an acquire of one of them waits only for
-- this transaction to commit.
--
-- The page CTE is the same, word for word, in sweeplist.sql (a test
-- checks), so that the dry run lists what this statement would remove.
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
), doomed AS (
    SELECT l.key
    FROM public.leases AS l
    JOIN page AS p ON l.key = p.key
    WHERE p.ended
      AND l.token = p.token AND l.expires_at = p.expires_at
    FOR UPDATE OF l SKIP LOCKED
), removed AS (
    DELETE FROM public.leases AS l
    USING doomed AS d
    WHERE l.key = d.key
    RETURNING l.key
)
SELECT (SELECT count(*) FROM page),
       (SELECT p.key FROM page AS p ORDER BY p.key DESC LIMIT 1),
       ARRAY(SELECT r.key FROM removed AS r ORDER BY r.key)
