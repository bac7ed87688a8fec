-- item: the state of item $2 of queue $1, and the largest plausible token
-- now: the database's clock in microseconds plus $3 (fence.MaxTokenLead in
-- microseconds).
SELECT state, attempts, fence_key, fence_token, owner, last_error,
    (extract(epoch FROM statement_timestamp()) * 1000000)::bigint + $3::bigint
FROM public.leasequeue_jobs
WHERE queue = $1::text AND id = $2::text
