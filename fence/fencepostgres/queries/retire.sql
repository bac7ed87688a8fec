-- retire: retire one page of fences that have not advanced for the
-- retention, raising the floors of their lease keys, in one statement.
--
-- $1 the last resource of the previous page ('' for the first page)
-- $2 page size: how many fences the page visits
-- $3 retention in microseconds
--
-- It runs in a READ COMMITTED transaction that holds the fences table in
-- SHARE ROW EXCLUSIVE mode, taken before this statement: no fenced write
-- is in flight (the lock waited for every transaction holding the
-- table's ROW EXCLUSIVE lock, which each fenced write takes, to end) and
-- none can begin until this transaction ends, so the rows it reads are
-- the latest versions and no writer advances them meanwhile.
--
-- The page is the next $2 resources after $1, in order (keyset
-- pagination). Of those, the rows whose updated_at (the time their token
-- last advanced) is at least $3 microseconds before the statement's
-- timestamp, on the database's clock, are deleted, and the floor of each
-- of their lease keys is raised to the highest token deleted under it
-- (a floor never goes down). If any row was deleted, the row with the
-- empty lease key counts one more retirement (see advance.sql).
--
-- Returns one row (resource, NULL) per deleted fence, and one row
-- (the page's last resource, how many it visited).
WITH page AS (
    SELECT f.resource FROM public.lease_fences AS f
    WHERE f.resource > $1::text
    ORDER BY f.resource
    LIMIT $2::bigint
), gone AS (
    DELETE FROM public.lease_fences AS f
    USING page
    WHERE f.resource = page.resource
      AND f.updated_at <= statement_timestamp() - $3::bigint * interval '1 microsecond'
    RETURNING f.resource, f.lease_key, f.token
), raised AS (
    INSERT INTO public.lease_fences_floors AS fl (lease_key, token)
    SELECT g.lease_key, max(g.token) FROM gone AS g GROUP BY g.lease_key
    ON CONFLICT (lease_key) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
    WHERE fl.token < EXCLUDED.token
), counted AS (
    INSERT INTO public.lease_fences_floors AS fl (lease_key, token)
    SELECT '', 1 WHERE EXISTS (SELECT FROM gone)
    ON CONFLICT (lease_key) DO UPDATE SET token = fl.token + 1, updated_at = now()
)
SELECT g.resource, NULL::bigint FROM gone AS g
UNION ALL
SELECT max(p.resource), count(*) FROM page AS p
