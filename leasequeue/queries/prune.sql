-- prune: remove (or, with $7, only list) up to $6 finished items of queue
-- $1 in state $2 ('done' or 'dead') that finished more than $3
-- microseconds ago on the database's clock, in the order (finished_at,
-- id) after the position ($4, $5) (-infinity to begin). An item is removed
-- only if its token is below the database's clock in microseconds: a
-- claim of an item enqueued again under its ID then gets a token of at
-- least the clock (claim.sql), above every token the removed item had.
-- SKIP LOCKED passes over rows another statement is writing. Each check
-- is made again by the DELETE, on the row it removes.
--
-- With $8 (the first page of a state), rows of that state without a
-- finished_at (finished by workers of a release from before it, during
-- a rolling upgrade) take it from updated_at first; they are visited by
-- the next walk.
--
-- Returns per item visited its ID, finished_at, and whether it was
-- removed, in that order. The DELETE finds the rows picked by their
-- ctid, which cannot change while the statement holds their locks: a
-- TID scan, where a generic plan might otherwise read the index of
-- finished items, whose range holds every row past its retention.
WITH stamped AS (
    UPDATE public.leasequeue_jobs
    SET finished_at = updated_at
    WHERE $8::boolean AND NOT $7::boolean
      AND queue = $1::text AND state IN ('done', 'dead') AND state = $2::text AND finished_at IS NULL
), picked AS (
    SELECT ctid, id, finished_at
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state IN ('done', 'dead') AND state = $2::text
      AND finished_at <= statement_timestamp() - $3::bigint * interval '1 microsecond'
      AND (finished_at, id) > ($4::timestamptz, $5::text)
      AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint
    ORDER BY finished_at, id
    LIMIT $6::integer
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM public.leasequeue_jobs
    WHERE NOT $7::boolean
      AND ctid = ANY (ARRAY(SELECT ctid FROM picked))
      AND state = $2::text
      AND finished_at <= statement_timestamp() - $3::bigint * interval '1 microsecond'
      AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint
    RETURNING id
)
SELECT p.id, p.finished_at, g.id IS NOT NULL
FROM picked AS p LEFT JOIN gone AS g ON g.id = p.id
ORDER BY p.finished_at, p.id
