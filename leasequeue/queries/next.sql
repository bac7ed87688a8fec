-- next: hide up to $2 due items of queue $1 for $3 milliseconds, and
-- return their IDs: first running items whose claim may have expired,
-- then pending items, each in the order they became due. SKIP LOCKED lets
-- concurrent pollers pass over each other's rows instead of waiting; the
-- new visible_at keeps the rows from the pollers that come after.
WITH rescue AS (
    SELECT queue, id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'running' AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT queue, id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'pending' AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2::integer - (SELECT count(*) FROM rescue)
    FOR UPDATE SKIP LOCKED
)
UPDATE public.leasequeue_jobs AS j
SET visible_at = now() + $3::bigint * interval '1 millisecond'
FROM (SELECT queue, id FROM rescue UNION ALL SELECT queue, id FROM fresh) AS due
WHERE j.queue = due.queue AND j.id = due.id
RETURNING j.id
