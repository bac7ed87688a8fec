-- next: hide up to $2 due items of queue $1 for $3 milliseconds, and
-- return their IDs. SKIP LOCKED lets concurrent pollers pass over each
-- other's rows instead of waiting; the new visible_at keeps the rows from
-- the pollers that come after.
UPDATE public.leasequeue_jobs AS j
SET visible_at = now() + $3::bigint * interval '1 millisecond'
FROM (
    SELECT queue, id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state IN ('pending', 'running') AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
) AS due
WHERE j.queue = due.queue AND j.id = due.id
RETURNING j.id
