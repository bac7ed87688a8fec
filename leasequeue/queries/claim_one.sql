-- claim_one: claim.sql for one item ($2 is ignored, always 1), in the
-- shape of a plain SKIP LOCKED loop's claim: the row is found by two
-- scalar subqueries, the second (pending items) evaluated only when the
-- first (running items whose claim expired) finds none. Arguments ($7
-- too), effects and results are those of claim.sql.
UPDATE public.leasequeue_jobs AS j
SET state       = 'running',
    attempts    = j.attempts + 1,
    fence_key   = $3::text || replace(replace(replace(replace(j.id, '%', '%25'), '{', '%7B'), '}', '%7D'), '/', '%2F'),
    fence_token = greatest(coalesce(j.fence_token, 0) + 1, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint),
    owner       = $4::text,
    claim_nonce = $5::text,
    visible_at  = statement_timestamp() + $6::bigint * interval '1 millisecond',
    updated_at  = statement_timestamp()
WHERE j.queue = $1::text AND $2::integer >= 1 AND j.id = coalesce(
    (SELECT id FROM public.leasequeue_jobs
     WHERE queue = $1::text AND state = 'running' AND visible_at <= statement_timestamp()
       AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
     ORDER BY visible_at LIMIT 1 FOR UPDATE SKIP LOCKED),
    (SELECT id FROM public.leasequeue_jobs
     WHERE queue = $1::text AND state = 'pending' AND visible_at <= statement_timestamp()
       AND coalesce(fence_token, 0) < (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $7::bigint
     ORDER BY visible_at LIMIT 1 FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.fence_token, j.attempts,
    greatest(0, (extract(epoch FROM statement_timestamp() - coalesce(j.ready_at, CASE WHEN j.attempts = 1 THEN j.created_at END)) * 1000000)::bigint)
