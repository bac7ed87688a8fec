-- next: hide up to $2 due items of queue $1 for $3 milliseconds, and
-- return their IDs: first running items whose claim may have expired,
-- then pending items, each in the order they became due. A running item
-- handed out had its claim expire, so its claim's secret is cleared: the
-- new visible_at only hides it, and never renews that claim
-- (claim_item.sql takes a running item without a secret). SKIP LOCKED lets
-- concurrent pollers pass over each other's rows instead of waiting; the
-- new visible_at keeps the rows from the pollers that come after.
--
-- The rows are updated through id = ANY (an index scan of the primary
-- key), not a join: a generic plan cannot know how many rows the LIMITs
-- let through, guesses a tenth of the table, and would hash-join the
-- whole table on every call.
WITH rescue AS (
    SELECT id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'running' AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT id
    FROM public.leasequeue_jobs
    WHERE queue = $1::text AND state = 'pending' AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2::integer - (SELECT count(*) FROM rescue)
    FOR UPDATE SKIP LOCKED
)
UPDATE public.leasequeue_jobs AS j
SET visible_at  = now() + $3::bigint * interval '1 millisecond',
    claim_nonce = NULL
WHERE j.queue = $1::text AND j.id = ANY (ARRAY(SELECT id FROM rescue UNION ALL SELECT id FROM fresh))
RETURNING j.id
