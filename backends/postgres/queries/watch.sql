-- Watch: mark key $1 as waited for, for five minutes, so that its release
-- notifies (release.sql). Rows marked for at least four more minutes are
-- left alone, so that many waiters do not rewrite the row.
--
-- The permit rows of a semaphore named $1 (lease.PermitKey($1, i): the
-- keys from $1 || '/permit/' up to $1 || '/permit0' in byte order, found
-- through the index leases_permits of migration 005) are marked too, so
-- that a waiter for a permit of the semaphore $1 hears the release of each
-- permit (the listener wakes the watches of $1 on a permit's release).
-- The rows are locked in byte order of their keys before they are
-- written, as the set functions of migration 005 lock theirs, so that a
-- watch and a set never wait for each other in a cycle.
--
-- $1 key.
UPDATE public.leases AS l
SET watched_until = clock_timestamp() + interval '5 minutes'
FROM (
    SELECT w.key
    FROM public.leases AS w
    WHERE (w.key = $1::text
           OR (w.key COLLATE "C" >= ($1::text || '/permit/')
               AND w.key COLLATE "C" < ($1::text || '/permit0')
               AND w.key LIKE '%/permit/%'))
      AND (w.watched_until IS NULL OR w.watched_until < clock_timestamp() + interval '4 minutes')
    ORDER BY w.key COLLATE "C"
    FOR UPDATE
) AS m
WHERE l.key = m.key
