-- due: the dry run of retire.sql: which fences of one page have not
-- advanced for the retention. Takes no lock and writes nothing.
--
-- $1 the last resource of the previous page ('' for the first page)
-- $2 page size, $3 retention in microseconds
--
-- Returns one row (resource, NULL) per fence due for retirement, and one
-- row (the page's last resource, how many it visited).
WITH page AS (
    SELECT f.resource, f.updated_at FROM public.lease_fences AS f
    WHERE f.resource > $1::text
    ORDER BY f.resource
    LIMIT $2::bigint
)
SELECT p.resource, NULL::bigint FROM page AS p
WHERE p.updated_at <= statement_timestamp() - $3::bigint * interval '1 microsecond'
UNION ALL
SELECT max(p.resource), count(*) FROM page AS p
